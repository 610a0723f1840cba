"""The zero-advantage skip: rows of advantage exactly 0 run no forward or backward, and the update is the same.

Float64 throughout (norms too): two updates (two AdamW steps with weight decay, so the moments carry over)
with the skip equal two without it to 1e-10, for every loss type, importance-sampling level and option,
with groups split over micro-batches and prompts shared or not.
"""

import warnings

import pytest
import torch

from infgrpo.algo import Objective
from infgrpo.algo.zero_advantage import skip_reason, trained_rows
from infgrpo.sampler import Rollouts
from infgrpo.settings import ConfigError, InfgrpoWarning
from infgrpo.training.hparams import check_settings
from infgrpo.update.config import UpdateConfig
from infgrpo.update.runner import PolicyUpdate
from tests.helpers import ALLOW_OBJECTIVE_WARNINGS, float64_norms, random_model

PROMPTS = [[1, 5, 7, 9], [3, 4], [8, 9, 10, 11, 12]]
G = 4
COMPLETIONS = [
    [20, 21, 22], [30, 31, 32, 33, 34, 35], [40, 41], [42],  # group 0: all advantages 0
    [50, 51], [52, 53, 54, 55], [56, 57, 58], [59],  # group 1: one row of advantage 0
    [60, 61, 62, 63, 64, 65, 66, 67], [68, 69], [70, 71, 72], [73, 74, 75, 76],  # group 2: a truncated row
]  # fmt: skip
REASONS = ["stop"] * 8 + ["length", "stop", "stop", "stop"]
ADVANTAGES = torch.tensor([0.0, 0, 0, 0, 1.2, 0, -0.7, -0.5, 0.9, -1.1, 0.4, -0.2], dtype=torch.float64)
MAX_LEN = 8


def rollouts():
    """3 prompts x 4 completions; behaviour log-probs a little off the policy's (for the corrections)."""
    gen = torch.Generator().manual_seed(7)
    logps = [-(torch.rand(len(c), generator=gen, dtype=torch.float64) + 0.5).float() for c in COMPLETIONS]
    return Rollouts(PROMPTS, G, COMPLETIONS, logps, list(REASONS))


def two_updates(obj, skip, budget, share, num_iterations=1, advantages=ADVANTAGES):
    """The parameters after two updates of the same rollout, and the last update's result."""
    model = float64_norms(random_model("qwen3", torch.float64)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    update = UpdateConfig(
        num_iterations=num_iterations, token_budget=budget, skip_zero_advantage="on" if skip else "off"
    )
    updater = PolicyUpdate(update, obj, max_completion_length=MAX_LEN, share_prompt=share)
    for _ in range(2):
        result = updater.run(model, rollouts(), advantages, lambda x: x.backward(), opt.step, opt.zero_grad)
    return {k: p.detach().clone() for k, p in model.named_parameters()}, result


def assert_same(a, b):
    for name, value in a.items():
        assert (value - b[name]).abs().max().item() <= 1e-10, name


LOSS_TYPES = ["grpo", "bnpo", "dapo", "dr_grpo", "cispo", "sapo", "luspo", "vespo"]


@ALLOW_OBJECTIVE_WARNINGS
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("share", [False, True])
def test_the_skip_trains_to_the_same_parameters_for_every_loss_type_and_level(loss_type, level, share):
    obj = Objective(loss_type=loss_type, importance_sampling_level=level, epsilon_high=0.28)
    want, full = two_updates(obj, False, 24, share)  # 24 tokens: groups split over micro-batches
    got, skipped = two_updates(obj, True, 24, share)
    assert_same(want, got)
    assert (full.rows_trained, full.rows_skipped) == (12, 0)
    assert (skipped.rows_trained, skipped.rows_skipped) == (7, 5)
    assert skipped.stats["loss"] == pytest.approx(full.stats["loss"], abs=1e-12)


OPTIONS = {
    "entropy-mask": dict(obj=Objective(loss_type="dapo", top_entropy_quantile=0.5)),
    "rollout-correction-token": dict(obj=Objective(rollout_correction="token_truncate")),
    "rollout-correction-sequence": dict(
        obj=Objective(rollout_correction="sequence_mask", rollout_correction_clip_max=2)
    ),
    "off-policy-mask": dict(obj=Objective(off_policy_mask_threshold=0.01)),
    "delta": dict(obj=Objective(delta=1.5, epsilon_high=0.28)),
    "mu2": dict(obj=Objective(loss_type="dapo"), num_iterations=2),
    "mask-truncated": dict(obj=Objective(loss_type="dr_grpo", mask_truncated_completions=True)),
    "vespo-token-correction": dict(obj=Objective(loss_type="vespo", rollout_correction="token_mask")),
}  # fmt: skip


@ALLOW_OBJECTIVE_WARNINGS
@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("budget,share", [(10_000, False), (24, False), (24, True)])
def test_the_skip_trains_to_the_same_parameters_with_every_option(option, budget, share):
    kw = dict(OPTIONS[option])
    obj = kw.pop("obj")
    want, _ = two_updates(obj, False, budget, share, **kw)
    got, _ = two_updates(obj, True, budget, share, **kw)
    assert_same(want, got)


def test_all_zero_advantages_run_one_row_and_step_adam_as_without_the_skip():
    zeros = torch.zeros(12, dtype=torch.float64)
    want, _ = two_updates(Objective(), False, 24, True, advantages=zeros)
    got, result = two_updates(Objective(), True, 24, True, advantages=zeros)
    assert_same(want, got)  # weight decay and the zero gradient, applied to every parameter alike
    assert (result.rows_trained, result.rows_skipped) == (1, 11)
    assert trained_rows(zeros, [len(c) for c in COMPLETIONS]) == [3]  # the shortest completion


def test_a_group_whose_rows_are_all_skipped_runs_no_prompt():
    updater = PolicyUpdate(UpdateConfig(token_budget=24, skip_zero_advantage="on"), Objective(), share_prompt=True)
    rows = trained_rows(ADVANTAGES)
    mbs = updater.pack(rollouts(), 24, rows)
    assert sorted(r for mb in mbs for r in mb.rows) == rows
    assert all(0 not in mb.prompts for mb in mbs)  # prompt 0's group is all zero: its prompt never runs
    assert sum(len(mb.prompts) for mb in mbs) < sum(len(mb.prompts) for mb in updater.pack(rollouts(), 24))


def skips(settings):
    """Whether the module's update, built from ``settings``, skips zero-advantage rows."""
    return PolicyUpdate(settings.update, settings.objective).skip_zero_advantage


def test_the_skip_is_refused_where_it_is_not_exact():
    assert skip_reason(Objective()) is None
    assert "KL term" in skip_reason(Objective(beta=0.04))
    assert "entropy bonus" in skip_reason(Objective(entropy_coef=0.01))
    with pytest.raises(ValueError, match="cannot be exact"):
        PolicyUpdate(UpdateConfig(skip_zero_advantage="on"), Objective(beta=0.04))
    with pytest.raises(ConfigError, match="update.skip_zero_advantage='on' cannot be exact here: objective.beta"):
        check_settings(objective={"beta": 0.04}, update={"skip_zero_advantage": "on"})
    with pytest.warns(InfgrpoWarning, match="update.skip_zero_advantage: off, because objective.beta=0.04"):
        assert skips(check_settings(objective={"beta": 0.04})) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert skips(check_settings()) is True
        assert skips(check_settings(update={"skip_zero_advantage": "off"})) is False
