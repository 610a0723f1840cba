"""The clipped surrogate, the KL term and the normalizations, by hand and in float64 loops."""

import math

import pytest
import torch

from infgrpo.algo import NORMALIZERS, POLICY_TERMS, LossNorm, Objective, objective_loss
from infgrpo.algo.kl import KL_ESTIMATORS
from infgrpo.algo.policy_terms import PolicyInputs


def clipped(logp, old, adv, **objective):
    """The clipped surrogate (grpo's policy term) of token-level ratios exp(logp - old)."""
    mask = torch.ones_like(logp)
    x = PolicyInputs(logp, logp - old, torch.exp(logp - old), adv.reshape(-1, 1), mask)
    return POLICY_TERMS.get("grpo")(x, Objective(**objective))


def one_token_loss(logp, old, ref, beta, bias_correction):
    """objective_loss of one sequence of one token (grpo: the loss is that token's term)."""
    obj = Objective(beta=beta, kl_bias_correction=bias_correction)
    norm = LossNorm(1, 1, 1)
    adv = torch.zeros(1, dtype=logp.dtype)
    return objective_loss(obj, logp, adv, torch.ones_like(logp), norm, old_logp=old, ref_logp=ref)


def test_clipped_surrogate_hand_computed():
    # ratios 1.5, 0.5, 0.5, 1.5 with advantages +1, +1, -1, -1 and epsilon 0.2
    ratio = torch.tensor([[1.5], [0.5], [0.5], [1.5]])
    t = clipped(ratio.log(), torch.zeros(4, 1), torch.tensor([1.0, 1.0, -1.0, -1.0]))
    assert torch.allclose(t.loss.flatten(), torch.tensor([-1.2, -0.5, 0.8, 1.5]))
    assert t.stats["clip_ratio/high"].flatten().tolist() == [1.0, 0.0, 0.0, 0.0]
    assert t.stats["clip_ratio/low"].flatten().tolist() == [0.0, 0.0, 1.0, 0.0]


def test_asymmetric_clipping_uses_each_epsilon():
    logp = torch.tensor([[math.log(1.5)], [math.log(0.5)]])
    t = clipped(logp, torch.zeros(2, 1), torch.tensor([1.0, -1.0]), epsilon_low=0.1, epsilon_high=0.28)
    assert torch.allclose(t.loss.flatten(), torch.tensor([-1.28, 0.9]))


def test_k3_kl_alone_without_correction_and_times_the_ratio_with_it():
    logp, ref = torch.tensor([[-1.0]]), torch.tensor([[-1.5]])
    d = -0.5
    k3 = math.exp(d) - d - 1
    out = one_token_loss(logp, logp.detach() - 0.1, ref, 0.5, bias_correction=False)
    assert out.means["kl"][0].item() == pytest.approx(k3) and out.loss.item() == pytest.approx(0.5 * k3)
    out = one_token_loss(logp, logp.detach() - 0.1, ref, 0.5, bias_correction=True)
    assert out.means["kl"][0].item() == pytest.approx(k3 * math.exp(0.1))
    assert out.loss.item() == pytest.approx(0.5 * k3 * math.exp(0.1))
    assert KL_ESTIMATORS.get("k1")(logp, ref).item() == pytest.approx(0.5)
    assert KL_ESTIMATORS.get("k2")(logp, ref).item() == pytest.approx(0.125)


def test_kl_gradient_without_correction_is_beta_times_the_k3_gradient():
    # at ratio 1 (first iteration) the corrected form adds kl * dlogp; the uncorrected one must not
    logp = torch.tensor([[-1.0, -0.3]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.5, -0.2]], dtype=torch.float64)
    obj = Objective(beta=0.1, kl_bias_correction=False)
    zero = torch.zeros(1, dtype=torch.float64)
    objective_loss(obj, logp, zero, torch.ones_like(logp), LossNorm(1, 2, 2), ref_logp=ref).loss.backward()
    expected = 0.1 * (1 - torch.exp(ref - logp.detach())) / 2  # d/dlogp of exp(ref - logp) - (ref - logp) - 1
    assert torch.allclose(logp.grad, expected, atol=1e-15)


def test_kl_gradient_with_correction_adds_kl_times_dlogp_even_on_policy():
    # TRL 1.16's use_bias_correction_kl (on by default there): the ratio is 1 on-policy but differentiable
    logp = torch.tensor([[-1.0, -0.3]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.5, -0.2]], dtype=torch.float64)
    zero = torch.zeros(1, dtype=torch.float64)
    obj = Objective(beta=0.1, kl_bias_correction=True)
    objective_loss(obj, logp, zero, torch.ones_like(logp), LossNorm(1, 2, 2), ref_logp=ref).loss.backward()
    d = ref - logp.detach()
    k3 = torch.exp(d) - d - 1
    assert torch.allclose(logp.grad, 0.1 * ((1 - torch.exp(d)) + k3) / 2, atol=1e-15)


def reference_loss(loss_type, per_token, mask, max_len):
    """Loop-based float64 recomputation of each normalization, written from TRL's definitions."""
    n, t = per_token.shape
    rows = [[per_token[i, j].item() for j in range(t) if mask[i, j] > 0] for i in range(n)]
    if loss_type in ("grpo", "sapo"):
        return sum(sum(r) / max(len(r), 1) for r in rows) / n
    if loss_type in ("bnpo", "dapo", "cispo", "vespo"):
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    if loss_type == "luspo":
        return sum(sum(r) for r in rows) / n
    return sum(sum(r) for r in rows) / (n * max_len)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo", "cispo", "sapo", "luspo", "vespo"])
def test_aggregation_matches_float64_recomputation_and_is_additive(loss_type):
    g = torch.Generator().manual_seed(1)
    per_token = torch.randn(6, 9, generator=g, dtype=torch.float64)
    lengths = [9, 1, 4, 7, 2, 5]
    mask = torch.tensor([[1.0] * n + [0.0] * (9 - n) for n in lengths], dtype=torch.float64)
    norm = LossNorm(num_sequences=6, num_tokens=sum(lengths), max_completion_length=12)
    aggregate = NORMALIZERS.get(loss_type)
    whole = aggregate(per_token, mask, norm)
    assert whole.item() == pytest.approx(reference_loss(loss_type, per_token, mask, 12), abs=1e-12)
    split = sum(aggregate(per_token[s], mask[s], norm) for s in (slice(0, 2), slice(2, 3), slice(3, 6)))
    assert split.item() == pytest.approx(whole.item(), abs=1e-12)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
def test_gradcheck_of_full_loss(loss_type):
    g = torch.Generator().manual_seed(2)
    logp = (-torch.rand(3, 5, generator=g, dtype=torch.float64)).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(3, 5, generator=g, dtype=torch.float64)
    ref = logp.detach() + 0.1 * torch.randn(3, 5, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.float64)
    obj = Objective(loss_type=loss_type, epsilon_high=0.28, beta=0.04)

    def f(lp):
        return objective_loss(obj, lp, adv, mask, LossNorm(3, 9, 5), old_logp=old, ref_logp=ref).loss

    assert torch.autograd.gradcheck(f, (logp,))


def test_unknown_loss_type_names_valid_ones():
    with pytest.raises(ValueError, match="loss_type='ppo' is not known; valid: grpo, bnpo, dr_grpo, dapo, cispo"):
        Objective(loss_type="ppo")
