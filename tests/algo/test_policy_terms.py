"""Policy terms, importance weights and the off-policy mask by hand, and against TRL's static helpers."""

import math

import pytest
import torch

from infgrpo.algo import LossNorm, Objective, gamma_weights, log_importance_weights, objective_loss, off_policy_mask
from infgrpo.algo.losses import NORMALIZERS

F64 = torch.float64


def one_token_loss(obj, ratio, adv, logp=-1.0):
    """(loss, d loss / d logp) of one token whose importance ratio is ``ratio`` (num_iterations > 1)."""
    lp = torch.tensor([[logp]], dtype=F64, requires_grad=True)
    old = lp.detach() - math.log(ratio)
    out = objective_loss(
        obj, lp, torch.tensor([adv], dtype=F64), torch.ones(1, 1, dtype=F64), LossNorm(1, 1, 1), old_logp=old
    )
    out.loss.backward()
    return out.loss.item(), lp.grad.item()


def test_clip_and_two_sided_delta_by_hand():
    obj = Objective(epsilon_high=0.2)
    assert one_token_loss(obj, 3.0, 1.0) == pytest.approx((-1.2, 0.0))  # clipped above: no gradient
    assert one_token_loss(obj, 3.0, -1.0) == pytest.approx((3.0, 3.0))  # A < 0: the ratio is not clipped above
    delta = Objective(epsilon_high=0.2, delta=2.0)
    assert one_token_loss(delta, 3.0, -1.0) == pytest.approx((2.0, 0.0))  # INTELLECT-2: capped at delta
    assert one_token_loss(delta, 1.5, -1.0) == pytest.approx((1.5, 1.5))  # below delta: unchanged


def test_cispo_clips_the_detached_weight_not_the_surrogate():
    obj = Objective(loss_type="cispo", epsilon_high=1.2)
    # loss = -min(r, 1.2) * A * logp with the weight detached: value 1.2 * 1 * 1, gradient -1.2 * A
    assert one_token_loss(obj, 1.5, 1.0) == pytest.approx((-1.2 * 1.0 * -1.0, -1.2))
    assert one_token_loss(obj, 0.5, 2.0) == pytest.approx((-0.5 * 2.0 * -1.0, -0.5 * 2.0))  # below the cap
    assert one_token_loss(obj, 3.0, -1.0) == pytest.approx((-1.2, 1.2))  # A < 0 is clipped too (one-sided cap)


def test_sapo_gate_by_hand():
    obj = Objective(loss_type="sapo", sapo_temperature_pos=1.0, sapo_temperature_neg=2.0)
    # on-policy the gate is sigmoid(0) * 4 / tau = 2 / tau, and its gradient is the plain policy gradient -A
    assert one_token_loss(obj, 1.0, 2.0) == pytest.approx((-2.0 / 1.0 * 2.0, -2.0))
    assert one_token_loss(obj, 1.0, -1.0) == pytest.approx((2.0 / 2.0, 1.0))
    # off-policy: loss -sigmoid(tau (r - 1)) 4 / tau A, gradient -4 s (1 - s) r A
    s = 1 / (1 + math.exp(-2.0 * 0.5))
    assert one_token_loss(obj, 1.5, -1.0) == pytest.approx((s * 4 / 2.0, 4 * s * (1 - s) * 1.5))


def test_vespo_gamma_weight_by_hand():
    log_ratio = torch.tensor([[0.2, 0.3, 7.0]], dtype=F64)  # the third position is padding
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=F64)
    phi = gamma_weights(torch.tensor([[1.0]], dtype=F64), log_ratio, mask, None, 2.0, 3.0, 3.0, 2.0)
    assert phi.item() == pytest.approx(math.exp(3.0 + 2.0 * 0.5 - 3.0 * math.exp(0.5)))  # w = e^0.5, k 2, lam 3
    phi = gamma_weights(torch.tensor([[-1.0]], dtype=F64), log_ratio, mask, None, 2.0, 3.0, 3.0, 2.0)
    assert phi.item() == pytest.approx(math.exp(2.0 + 3.0 * 0.5 - 2.0 * math.exp(0.5)))  # the negative pair
    on_policy = gamma_weights(torch.tensor([[1.0]], dtype=F64), 0 * log_ratio, mask, None, 2.0, 3.0, 3.0, 2.0)
    assert on_policy.item() == pytest.approx(1.0)  # phi(1) = 1
    rw = torch.tensor([[2.0, 0.0, 0.0]], dtype=F64)  # token-masked correction: log 0 clamps to log 1e-8
    phi = gamma_weights(torch.tensor([[1.0]], dtype=F64), log_ratio, mask, rw, 2.0, 3.0, 3.0, 2.0)
    log_w = 0.5 + math.log(2.0) + math.log(1e-8)
    assert phi.item() == pytest.approx(math.exp(3.0 + 2.0 * log_w - 3.0 * math.exp(log_w)))
    with pytest.raises(ValueError, match="vespo takes token-level rollout-correction weights"):
        gamma_weights(torch.ones(1, 1), log_ratio, mask, torch.ones(1, 1), 2.0, 3.0, 3.0, 2.0)


def test_sequence_level_weight_is_the_exp_of_the_mean_log_ratio():
    logp = torch.tensor([[0.1, 0.3, 5.0], [0.0, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]], dtype=F64)
    w = log_importance_weights(logp, torch.zeros_like(logp), mask, "sequence")
    assert w.shape == (2, 1) and w[:, 0].tolist() == pytest.approx([0.2, 0.0])  # an empty row gets 0
    assert torch.equal(log_importance_weights(logp, torch.zeros_like(logp), mask, "token"), logp)
    with pytest.raises(ValueError, match="importance_sampling_level='group' is not known; valid: token, sequence"):
        log_importance_weights(logp, logp, mask, "group")


def test_off_policy_mask_by_hand():
    # per-sequence mean of behaviour - policy: 0.9, 0.2, 0.6, 5.0 (padding ignored); threshold 0.5
    logp = torch.zeros(4, 2, dtype=F64)
    behaviour = torch.tensor([[0.9, 9.0], [0.1, 0.3], [0.6, 9.0], [5.0, 5.0]], dtype=F64)
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=F64)
    keep = off_policy_mask(torch.tensor([1.0, -1.0, -1.0, 0.0], dtype=F64), logp, behaviour, mask, 0.5)
    assert keep[:, 0].tolist() == [1.0, 1.0, 0.0, 1.0]  # A >= 0 always kept; a far-off negative one dropped
    behaviour[2, 0] = float("nan")  # no evidence: KL 0, kept
    assert off_policy_mask(torch.tensor([1.0, -1.0, -1.0, 0.0]), logp, behaviour, mask, 0.5)[2].item() == 1.0


def test_luspo_scales_each_sequence_by_its_length():
    per_token = torch.tensor([[2.0], [3.0]], dtype=F64)  # a sequence-level loss, (N, 1)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], dtype=F64)
    norm = LossNorm(num_sequences=4, num_tokens=4, max_completion_length=3)  # two more rows elsewhere
    assert NORMALIZERS.get("luspo")(per_token, mask, norm).item() == pytest.approx((2 * 3 + 3 * 1) / 4)
    assert NORMALIZERS.get("sapo")(per_token, mask, norm).item() == pytest.approx((2 + 3) / 4)
    assert NORMALIZERS.get("cispo")(per_token, mask, norm).item() == NORMALIZERS.get("dapo")(per_token, mask, norm)


def test_gamma_weights_and_off_policy_mask_equal_trls_static_helpers():
    trainer = pytest.importorskip("trl.trainer.grpo_trainer").GRPOTrainer
    g = torch.Generator().manual_seed(0)
    adv = torch.randn(8, 1, generator=g, dtype=F64)
    logp = -torch.rand(8, 6, generator=g, dtype=F64)
    log_ratio = 0.4 * torch.randn(8, 6, generator=g, dtype=F64)
    mask = (torch.arange(6)[None] < torch.randint(1, 7, (8, 1), generator=g)).to(F64)
    rw = torch.where(mask.bool(), torch.exp(0.1 * torch.randn(8, 6, generator=g, dtype=F64)), 1.0)  # 1 on padding
    rw[0, 0] = 0.0  # a token_mask zero
    default = torch.get_default_dtype()
    torch.set_default_dtype(F64)  # TRL's torch.where(cond, float, float) takes the default dtype
    try:
        for k in ((2.0, 3.0, 3.0, 2.0), (1.5, 0.0, 0.5, 4.0)):
            for w in (None, rw):
                want = trainer.get_gamma_weights(adv, log_ratio, mask, w, *k)
                assert torch.allclose(gamma_weights(adv, log_ratio, mask, w, *k), want, rtol=1e-13, atol=0)
        behaviour = logp + 0.3 * torch.randn(8, 6, generator=g, dtype=F64)
        for threshold in (0.0, 0.05, 0.5):
            want = trainer.get_off_policy_mask(adv, logp, behaviour, mask, threshold)
            assert torch.equal(off_policy_mask(adv[:, 0], logp, behaviour, mask, threshold), want)
    finally:
        torch.set_default_dtype(default)
