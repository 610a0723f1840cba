"""Objective: TRL's option names and defaults, validation with clear errors, TRL's refusals and warnings."""

import dataclasses
import warnings

import pytest
import torch

from infgrpo.algo import LossNorm, Objective, entropy_threshold, high_entropy_mask, objective_loss, reduce_means
from infgrpo.runtime.ranks import Ranks
from infgrpo.settings import InfgrpoWarning
from tests.algo.thread_ranks import run_ranks


def test_defaults_are_trl_1_16s_except_the_documented_ones():
    trl_config = pytest.importorskip("trl").GRPOConfig
    trl = {f.name: f.default for f in dataclasses.fields(trl_config)}
    ours = {f.name: f.default for f in dataclasses.fields(Objective)}
    same = [
        "beta", "importance_sampling_level", "sapo_temperature_pos", "sapo_temperature_neg", "vespo_k_pos",
        "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg", "top_entropy_quantile", "entropy_coef",
        "use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target",
        "off_policy_mask_threshold", "delta",
    ]  # fmt: skip
    for name in same:
        assert ours[name] == trl[name], name
    assert ours["kl_bias_correction"] == trl["use_bias_correction_kl"] is True
    assert ours["epsilon_low"] == trl["epsilon"] == 0.2 and trl["epsilon_high"] is None  # None = epsilon in TRL
    assert ours["rollout_correction_clip_max"] == trl["vllm_importance_sampling_clip_max"] == 3.0
    assert ours["rollout_correction_clip_min"] is trl["vllm_importance_sampling_clip_min"] is None
    # chosen differently, and documented on the fields: GRPOModule's loss default; no correction unless asked
    assert (ours["loss_type"], trl["loss_type"]) == ("grpo", "dapo")
    assert (ours["rollout_correction"], trl["vllm_importance_sampling_mode"]) == ("none", "sequence_mask")


@pytest.mark.parametrize(
    "field,value,message",
    [
        (
            "loss_type",
            "ppo",
            "loss_type='ppo' is not known; valid: grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo",
        ),
        (
            "importance_sampling_level",
            "group",
            "importance_sampling_level='group' is not known; valid: token, sequence",
        ),
        ("rollout_correction", "tis", "rollout_correction='tis' is not known; valid: none, token_truncate"),
        ("kl_estimator", "k4", "kl_estimator='k4' is not known; valid: k1, k2, k3"),
        ("epsilon_high", -0.1, "epsilon_high=-0.1 must be a number >= 0"),
        ("beta", float("nan"), "beta=nan must be a number >= 0"),
        ("sapo_temperature_neg", 0.0, r"sapo_temperature_neg=0.0 must be a number > 0 \(the gate divides by it\)"),
        ("vespo_lambda_pos", -1.0, "vespo_lambda_pos=-1.0 must be a number >= 0"),
        ("top_entropy_quantile", 1.2, r"top_entropy_quantile=1.2 must be in \[0, 1\]"),
        ("top_entropy_quantile", "0.2", "top_entropy_quantile='0.2' must be in"),
        ("entropy_coef_delta", -0.005, "entropy_coef_delta=-0.005 must be a number >= 0"),
        ("delta", 0.0, "delta=0.0 must be None or a number > 0"),
        ("off_policy_mask_threshold", -0.5, "off_policy_mask_threshold=-0.5 must be None or a number >= 0"),
        ("rollout_correction_clip_max", 0.0, "rollout_correction_clip_max=0.0 must be None or a number > 0"),
        ("rollout_correction_clip_min", -1.0, "rollout_correction_clip_min=-1.0 must be None or a number >= 0"),
    ],
)
def test_bad_values_name_the_field_the_value_and_what_is_valid(field, value, message):
    with pytest.raises(ValueError, match=message):
        Objective(**{field: value})


def test_combinations_trl_refuses_are_refused():
    # GRPOConfig.__post_init__: clip_min must be below clip_max; a truncation needs a bound
    with pytest.raises(
        ValueError, match="rollout_correction_clip_min=3.0 must be less than rollout_correction_clip_max=3.0"
    ):
        Objective(rollout_correction="token_mask", rollout_correction_clip_min=3.0)
    with pytest.raises(ValueError, match="rollout_correction='sequence_truncate' needs rollout_correction_clip_min or"):
        Objective(rollout_correction="sequence_truncate", rollout_correction_clip_max=None)
    Objective(rollout_correction="token_mask", rollout_correction_clip_max=None)  # a mask without bounds: allowed
    # GRPOTrainer.__init__: VESPO takes only token-level corrections
    for mode in ("sequence_mask", "sequence_truncate"):
        with pytest.raises(ValueError, match=f"rollout_correction='{mode}' cannot be used with loss_type='vespo'"):
            Objective(loss_type="vespo", rollout_correction=mode)
    for mode in ("none", "token_truncate", "token_mask"):
        Objective(loss_type="vespo", rollout_correction=mode)
    # ours: the adaptive schedule's bounds
    with pytest.raises(ValueError, match="entropy_coef_min=0.5 must be <= entropy_coef_max=0.1"):
        Objective(entropy_coef_min=0.5, entropy_coef_max=0.1)
    with pytest.raises(ValueError, match=r"entropy_coef=2.0 \(the adaptive schedule's start\) must be in"):
        Objective(use_adaptive_entropy=True, entropy_coef=2.0)
    Objective(entropy_coef=2.0)  # a static coefficient has no bounds


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"loss_type": "luspo"}, "loss_type='luspo' is meant with importance_sampling_level='sequence'"),
        ({"loss_type": "vespo", "importance_sampling_level": "sequence"}, "should be 'token'"),
        ({"loss_type": "dapo", "importance_sampling_level": "sequence"}, "weights each sequence by its length"),
        ({"loss_type": "cispo", "importance_sampling_level": "sequence", "epsilon_high": 5.0}, "by its length"),
        ({"loss_type": "cispo"}, "caps the importance weight at epsilon_high=0.2 itself"),
        ({"delta": 1.1}, r"delta=1.1 is not above 1 \+ epsilon_high=1.2"),
    ],
)
def test_combinations_trl_warns_about_warn(settings, message):
    with pytest.warns(InfgrpoWarning, match=message):
        Objective(**settings)


@pytest.mark.parametrize(
    "settings",
    [
        {"loss_type": "grpo", "importance_sampling_level": "sequence"},  # GSPO
        {"loss_type": "luspo", "importance_sampling_level": "sequence"},
        {"loss_type": "cispo", "epsilon_high": 5.0},
        {"loss_type": "sapo"},
        {"delta": 1.5},
    ],
)
def test_recommended_setups_do_not_warn(settings):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Objective(**settings)


def test_what_the_options_need():
    assert not Objective().needs_entropy
    assert Objective(top_entropy_quantile=0.2).entropy_mask and Objective(top_entropy_quantile=0.2).needs_entropy
    assert Objective(use_adaptive_entropy=True).entropy_bonus  # adaptive stays on even at a zero coefficient
    assert Objective(entropy_coef=0.01).entropy_bonus and not Objective(entropy_coef=0.01).entropy_mask
    with pytest.raises(dataclasses.FrozenInstanceError):
        Objective().beta = 1.0


def test_objective_loss_names_what_an_option_is_missing():
    lp, adv, mask, norm = torch.zeros(1, 2), torch.ones(1), torch.ones(1, 2), LossNorm(1, 2, 2)
    cases = [
        (Objective(beta=0.1), {}, r"beta=0.1 needs reference log-probs \(ref_logp\)"),
        (Objective(rollout_correction="token_mask"), {}, r"needs the rollout's log-probs \(behaviour_logp\)"),
        (Objective(entropy_coef=0.1), {}, r"need per-token entropies \(entropy\)"),
        (Objective(top_entropy_quantile=0.2), {"entropy": lp}, r"needs the batch's entropy mask \(entropy_mask"),
    ]
    for obj, extra, message in cases:
        with pytest.raises(ValueError, match=message):
            objective_loss(obj, lp, adv, mask, norm, **extra)


def test_ranks_sharing_a_batch_sum_to_the_one_process_loss_and_metrics():
    """Data parallel: with whole-batch counts in LossNorm, each rank's loss is its share of the global loss and
    reduce_means over ranks gives the one-process metrics (DDP then averages the gradients of loss x world)."""
    obj = Objective(loss_type="dapo", beta=0.04, top_entropy_quantile=0.5, entropy_coef=0.01, delta=1.3)
    g = torch.Generator().manual_seed(4)
    logp = -torch.rand(6, 5, generator=g, dtype=torch.float64)
    old = logp + 0.3 * torch.randn(6, 5, generator=g, dtype=torch.float64)
    ref = logp + 0.1 * torch.randn(6, 5, generator=g, dtype=torch.float64)
    ent = torch.rand(6, 5, generator=g, dtype=torch.float64)
    adv = torch.randn(6, generator=g, dtype=torch.float64)
    mask = (torch.arange(5)[None] < torch.tensor([5, 2, 4, 1, 3, 5])[:, None]).double()

    def run(rows, ranks):
        threshold = entropy_threshold([ent[rows]], [mask[rows]], 0.5, ranks)
        em = high_entropy_mask(ent[rows], mask[rows], threshold)
        kept = ranks.sum(torch.tensor([(em * mask[rows]).sum().item()], dtype=torch.float64)).item()
        norm = LossNorm(6, int(mask.sum()), 5, int(kept))
        out = objective_loss(
            obj, logp[rows], adv[rows], mask[rows], norm, old_logp=old[rows], ref_logp=ref[rows],
            entropy=ent[rows], entropy_mask=em,
        )  # fmt: skip
        return out.loss.item(), reduce_means([out], ranks)

    one_loss, one_means = run(torch.arange(6), Ranks())
    shards = [torch.tensor([0, 1, 2, 3]), torch.tensor([4, 5])]
    got = run_ranks(2, lambda ranks, r: run(shards[r], ranks))
    assert sum(loss for loss, _ in got) == pytest.approx(one_loss, abs=1e-12)
    for _, means in got:
        assert means.keys() == one_means.keys() and {"kl", "entropy", "clip_ratio"} <= means.keys()
        for k, v in one_means.items():
            assert means[k] == pytest.approx(v, abs=1e-12), k
