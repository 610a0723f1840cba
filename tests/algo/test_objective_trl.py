"""objective_loss equals TRL 1.16's own ``GRPOTrainer._compute_loss`` in float64: loss, gradients, metrics.

Loss types x importance-sampling levels x clip settings x masks (entropy, off-policy, rollout
correction) x KL x entropy bonus, each over several micro-batch splits (rows in any order, each
micro-batch padded only to its own longest row): the sum of our micro-batch losses and its gradient
equal TRL's loss of the whole batch in one micro-batch, to 1e-10.
"""

import dataclasses

import pytest
import torch

pytest.importorskip("trl")

from infgrpo.algo import (  # noqa: E402
    AdaptiveEntropyCoef,
    LossNorm,
    Objective,
    entropy_threshold,
    high_entropy_mask,
    objective_loss,
    reduce_means,
)
from tests.algo.trl_reference import TRLLoss, reference_importance_sampling_ratio  # noqa: E402
from tests.helpers import ALLOW_OBJECTIVE_WARNINGS  # noqa: E402

pytestmark = ALLOW_OBJECTIVE_WARNINGS  # loss types x levels: the combinations TRL accepts with a warning too

N, C, MAX_LEN = 6, 7, 9
LENGTHS = [7, 1, 4, 6, 2, 5]
ADVANTAGES = [1.0, -0.5, 0.3, -1.2, 0.0, -0.8]
SPLITS = [[[0, 1, 2, 3, 4, 5]], [[0, 1], [2], [3, 4, 5]], [[5, 0], [3], [1, 2, 4]]]
LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]
METRICS = {  # TRL's name -> ours
    "kl": "kl",
    "entropy": "entropy",
    "clip_ratio/low_mean": "clip_ratio/low",
    "clip_ratio/high_mean": "clip_ratio/high",
    "clip_ratio/region_mean": "clip_ratio",
    "cispo_clip_ratio": "cispo_clip_ratio",
    "vespo/phi_seq_mean": "vespo/phi_seq_mean",
}
FEATURES = {
    "plain": {},
    "asymmetric_clip": {"epsilon_low": 0.1, "epsilon_high": 0.28},
    "two_sided_delta": {"delta": 1.25},
    "kl": {"beta": 0.04},
    "kl_without_bias_correction": {"beta": 0.04, "kl_bias_correction": False},
    "entropy_mask": {"top_entropy_quantile": 0.4},
    "entropy_mask_rho_0": {"top_entropy_quantile": 0.0},
    "entropy_bonus": {"entropy_coef": 0.01},
    "entropy_mask_and_bonus": {"top_entropy_quantile": 0.4, "entropy_coef": 0.01},
    "off_policy_mask": {"off_policy_mask_threshold": 0.05},
    "token_truncate": {"rollout_correction": "token_truncate", "rollout_correction_clip_max": 1.05},
    "token_mask": {
        "rollout_correction": "token_mask",
        "rollout_correction_clip_min": 0.95,
        "rollout_correction_clip_max": 1.05,
    },
    "sequence_truncate": {
        "rollout_correction": "sequence_truncate",
        "rollout_correction_clip_min": 0.9,
        "rollout_correction_clip_max": 1.1,
    },
    "sequence_mask": {"rollout_correction": "sequence_mask", "rollout_correction_clip_max": 1.1},
    "everything": {
        "beta": 0.04,
        "delta": 1.25,
        "top_entropy_quantile": 0.4,
        "entropy_coef": 0.01,
        "off_policy_mask_threshold": 0.05,
        "rollout_correction": "token_mask",
        "rollout_correction_clip_min": 0.95,
        "rollout_correction_clip_max": 1.05,
    },
}


@dataclasses.dataclass
class Batch:
    mask: torch.Tensor
    logp: torch.Tensor
    old: torch.Tensor | None
    ref: torch.Tensor
    behaviour: torch.Tensor
    entropy: torch.Tensor
    advantages: torch.Tensor


def make_batch(seed=0, on_policy=False):
    """A batch of 6 rows of 1-7 tokens; padding holds random values (everything must mask it out)."""
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    mask = (torch.arange(C)[None] < torch.tensor(LENGTHS)[:, None]).to(f64)
    logp = -2 * torch.rand(N, C, generator=g, dtype=f64)
    shift = torch.tensor([-0.3, 0.25, 0.0, 0.3, -0.2, -0.35], dtype=f64)[:, None]  # whole sequences clipped too
    old = logp + 0.3 * torch.randn(N, C, generator=g, dtype=f64) + shift  # token ratios exp(+-0.3): some clipped
    ref = logp + 0.2 * torch.randn(N, C, generator=g, dtype=f64)
    behaviour = (logp if on_policy else old) + 0.08 * torch.randn(N, C, generator=g, dtype=f64)
    entropy = (3 * torch.rand(N, C, generator=g)).to(f64)  # float32 values (TRL's quantile runs in float32)
    return Batch(mask, logp, None if on_policy else old, ref, behaviour, entropy, torch.tensor(ADVANTAGES, dtype=f64))


def trl_side(obj, b, trl=None):
    """TRL's loss of the whole batch, its gradients wrt the log-probs and entropies, and the stand-in trainer."""
    trl = trl or TRLLoss(obj, MAX_LEN)
    logp, entropy = b.logp.clone().requires_grad_(), b.entropy.clone().requires_grad_()
    old = b.old
    ratio = None
    if obj.rollout_correction != "none":
        old = b.logp.clone() if old is None else old  # TRL computes old log-probs whenever it corrects
        ratio = reference_importance_sampling_ratio(
            old, b.behaviour, b.mask, obj.rollout_correction, obj.rollout_correction_clip_min,
            obj.rollout_correction_clip_max,
        )  # fmt: skip
    ref = b.ref if obj.beta else None
    loss = trl(logp, entropy, b.advantages, b.mask, b.mask.sum(), old, ref, b.behaviour, ratio)
    loss.backward()
    return loss.detach(), logp.grad, entropy.grad, trl


def our_side(obj, b, split, entropy_coef=None):
    """The sum of our micro-batch losses over ``split``, its gradients, the outputs and the reduced metrics."""
    logp, entropy = b.logp.clone().requires_grad_(), b.entropy.clone().requires_grad_()
    rows = [torch.tensor(r) for r in split]
    width = [max(LENGTHS[i] for i in r) for r in split]  # each micro-batch padded to its own longest row

    def part(x, k):
        return None if x is None else x[rows[k]][:, : width[k]]

    masks = [part(b.mask, k) for k in range(len(split))]
    ents = [part(entropy, k) for k in range(len(split))]
    emasks = [None] * len(split)
    bonus_tokens = None
    if obj.entropy_mask:
        threshold = entropy_threshold(ents, masks, obj.top_entropy_quantile)
        emasks = [high_entropy_mask(e, m, threshold) for e, m in zip(ents, masks, strict=True)]
        bonus_tokens = int(sum((m * e).sum().item() for m, e in zip(masks, emasks, strict=True)))
    norm = LossNorm(N, int(b.mask.sum()), MAX_LEN, bonus_tokens)
    outs = [
        objective_loss(
            obj,
            part(logp, k),
            b.advantages[rows[k]],
            masks[k],
            norm,
            old_logp=part(b.old, k),
            ref_logp=part(b.ref, k),
            entropy=ents[k],
            entropy_mask=emasks[k],
            behaviour_logp=part(b.behaviour, k),
            entropy_coef=entropy_coef,
        )
        for k in range(len(split))
    ]
    loss = sum(o.loss for o in outs)
    loss.backward()
    return loss.detach(), logp.grad, entropy.grad, outs, reduce_means(outs)


def assert_equal_to_trl(obj, b, split, trl_result, entropy_coef=None):
    want, want_dlogp, want_dent, trl = trl_result
    got, dlogp, dent, outs, means = our_side(obj, b, split, entropy_coef)
    assert abs(got.item() - want.item()) <= 1e-10
    assert (dlogp - want_dlogp).abs().max() <= 1e-10 and want_dlogp.abs().max() > 0
    if want_dent is None:
        assert dent is None
    else:
        assert dent is not None and (dent - want_dent).abs().max() <= 1e-10
        coef = obj.entropy_coef if entropy_coef is None else entropy_coef
        assert (want_dent.abs().max() > 0) == (coef != 0)  # the bonus's gradient reaches the entropies
    for theirs, name in METRICS.items():
        if theirs in trl.metrics:
            assert means[name] == pytest.approx(trl.metrics[theirs][-1], abs=1e-12), name
    if "policy_loss" in trl.metrics:
        assert sum(o.policy_loss.item() for o in outs) == pytest.approx(trl.metrics["policy_loss"][-1], abs=1e-12)
    return means


def objective(loss_type, level, feature):
    settings = dict(FEATURES[feature])
    if loss_type == "cispo" and "epsilon_high" not in settings:
        settings["epsilon_high"] = 1.2  # CISPO's cap on the weight itself (ScaleRL: 5.0); 1.2 clips some tokens
    return Objective(loss_type=loss_type, importance_sampling_level=level, **settings)


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_objective_equals_trl_loss_and_gradient_for_every_split(loss_type, level, feature):
    if loss_type == "vespo" and FEATURES[feature].get("rollout_correction", "").startswith("sequence"):
        with pytest.raises(ValueError, match="cannot be used with loss_type='vespo'"):
            objective(loss_type, level, feature)
        return
    obj = objective(loss_type, level, feature)
    b = make_batch()
    trl_result = trl_side(obj, b)
    for split in SPLITS:
        means = assert_equal_to_trl(obj, b, split, trl_result)
    # the option did something on this batch (else the comparison would prove little)
    if obj.loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        assert means["clip_ratio"] > 0
    if obj.loss_type == "cispo":
        assert means["cispo_clip_ratio"] > 0
    if obj.off_policy_mask_threshold is not None:
        assert 0 < means["off_policy_mask/dropped"] < 1
    if obj.rollout_correction != "none":
        assert means["rollout/correction_weight_mean"] != pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("feature", ["plain", "kl", "entropy_mask_and_bonus", "off_policy_mask", "token_truncate"])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_first_iteration_without_old_logprobs_equals_trl(loss_type, level, feature):
    """num_iterations = 1: old = logp detached (ratio 1 with gradient), as TRL without old_per_token_logps."""
    obj = objective(loss_type, level, feature)
    b = make_batch(seed=1, on_policy=True)
    trl_result = trl_side(obj, b)
    for split in SPLITS:
        means = assert_equal_to_trl(obj, b, split, trl_result)
    if loss_type == "vespo":
        assert means["vespo/phi_seq_mean"] == pytest.approx(1.0, abs=1e-12) or obj.rollout_correction != "none"


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_trl_own_gradient_accumulation_over_equal_micro_batches_equals_ours(loss_type, level):
    """TRL's accumulation (3 micro-batches of 2 rows, accumulation 3) sums to our one-batch loss, where TRL's
    own definition does not depend on the split (not bnpo, the entropy mask or the bonus)."""
    obj = objective(loss_type, level, "kl")
    b = make_batch(seed=2)
    trl = TRLLoss(obj, MAX_LEN, accumulation=3)
    logp, entropy = b.logp.clone().requires_grad_(), b.entropy.clone().requires_grad_()
    total = 0.0
    for k, rows in enumerate(([0, 1], [2, 3], [4, 5])):
        r = torch.tensor(rows)
        loss = trl(
            logp[r], entropy[r], b.advantages[r], b.mask[r], b.mask.sum(), b.old[r], b.ref[r], b.behaviour[r],
            sync_gradients=k == 2,
        )  # fmt: skip
        loss.backward()
        total += loss.item()
    got, dlogp, _, _, _ = our_side(obj, b, SPLITS[1])
    assert abs(got.item() - total) <= 1e-10
    assert (dlogp - logp.grad).abs().max() <= 1e-10


def test_trl_bnpo_and_entropy_quantile_depend_on_the_split_and_ours_do_not():
    """The two split-dependent definitions of TRL, shown: TRL's per-micro-batch result differs from its
    one-batch result, ours equals TRL's one-batch result for every split (tested above)."""
    for settings in ({"loss_type": "bnpo"}, {"loss_type": "dapo", "top_entropy_quantile": 0.4}):
        obj = Objective(**settings)
        b = make_batch(seed=3)
        whole = trl_side(obj, b)[0].item()
        trl = TRLLoss(obj, MAX_LEN, accumulation=3)
        parts = 0.0
        for rows in ([0, 1], [2, 3], [4, 5]):
            r = torch.tensor(rows)
            lp, ent = b.logp[r].clone().requires_grad_(), b.entropy[r].clone().requires_grad_()
            parts += trl(lp, ent, b.advantages[r], b.mask[r], b.mask.sum(), b.old[r], None, b.behaviour[r]).item()
        assert abs(parts - whole) > 1e-4
        assert our_side(obj, b, SPLITS[1])[0].item() == pytest.approx(whole, abs=1e-10)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_entropy_mask_tie_in_float64_falls_as_in_trl(loss_type):
    """A float64 entropy exactly on the quantile (rho 0.5 of 25 tokens: the median) whose float32 rounding is
    above it: TRL's float32 threshold drops it, and so does ours (a float64 threshold would keep it)."""
    obj = Objective(loss_type=loss_type, top_entropy_quantile=0.5)
    b = make_batch(seed=4)
    g = torch.Generator().manual_seed(4)
    b.entropy = 3 * torch.rand(N, C, generator=g, dtype=torch.float64)  # float64 values, not float32 ones
    tokens = b.entropy[b.mask.bool()]
    median = torch.sort(tokens).values[tokens.numel() // 2]  # rank 0.5 x 24 = 12 exactly: the threshold
    assert tokens.numel() == 25 and median.float().double() != median
    if median.float().double() < median:  # move it just below its float32 neighbour above (its rank stays)
        up = torch.nextafter(median.float(), torch.tensor(torch.inf)).double()
        b.entropy[b.entropy == median] = up - (up - median.float().double()) / 4
        tokens, median = b.entropy[b.mask.bool()], torch.sort(b.entropy[b.mask.bool()]).values[12]
    assert median.float().double() > median  # float32 rounds the tie up
    trl_result = trl_side(obj, b)
    for split in SPLITS:
        assert_equal_to_trl(obj, b, split, trl_result)
    kept = high_entropy_mask(b.entropy, b.mask, entropy_threshold([b.entropy], [b.mask], 0.5)).sum().item()
    assert kept == 12 and (tokens >= median).sum().item() == 13  # the tie dropped; >= in float64 keeps 13


@pytest.mark.parametrize("top_entropy_quantile", [1.0, 0.5])
def test_adaptive_entropy_schedule_equals_trl_over_steps(top_entropy_quantile):
    """Five optimizer steps whose mean entropy crosses the target: TRL's coefficient, gating and losses."""
    obj = Objective(
        loss_type="dapo",
        use_adaptive_entropy=True,
        entropy_coef=0.02,
        entropy_coef_delta=0.01,
        entropy_coef_max=0.035,
        entropy_target=1.0,
        top_entropy_quantile=top_entropy_quantile,
    )
    trl = TRLLoss(obj, MAX_LEN)
    ours = AdaptiveEntropyCoef.from_objective(obj)
    applied, coefs = [], []
    for step, scale in enumerate([1.0, 0.4, 0.4, 0.4, 1.5]):  # mean entropy ~1.5, 0.6, 0.6, 0.6, 2.2
        b = make_batch(seed=10 + step)
        b.entropy = (b.entropy * scale).float().double()  # float32 values: TRL rounds its quantile to float32
        coef = ours.applied()
        trl_result = trl_side(obj, b, trl)
        means = assert_equal_to_trl(obj, b, SPLITS[2], trl_result, entropy_coef=coef)
        outs = our_side(obj, b, SPLITS[2], entropy_coef=coef)[3]
        bonus = torch.stack([o.bonus for o in outs]).sum(0)
        world = ours.update(*bonus.tolist())
        assert world == pytest.approx(trl.trainer._last_world_entropy, abs=1e-12)
        assert ours.coef == pytest.approx(trl.trainer.entropy_coef, abs=1e-15)
        assert means["entropy"] > 0
        applied.append(coef)
        coefs.append(ours.coef)
    assert applied[0] == 0.0 and applied[2] > 0  # no bonus before a measurement; on once entropy fell
    assert coefs == pytest.approx([0.01, 0.02, 0.03, 0.035, 0.025])  # down, up, up, capped at max, down


def test_adaptive_entropy_needs_the_step_coefficient():
    obj = Objective(use_adaptive_entropy=True)
    b = make_batch()
    with pytest.raises(ValueError, match="AdaptiveEntropyCoef.applied"):
        objective_loss(obj, b.logp, b.advantages, b.mask, LossNorm(N, 25, MAX_LEN), entropy=b.entropy)
