"""A collapsed policy (entropy near 0, no reward spread, several steps in a row) warns once; a normal run never."""

import warnings

import pytest

from infgrpo import GRPOModule, OptimizerConfig, SamplerConfig
from infgrpo.data import PromptDataModule
from infgrpo.rewards import register_reward
from infgrpo.rewards.config import RewardConfig
from infgrpo.settings import InfgrpoWarning
from infgrpo.training.collapse import CollapseWatch, collapse_message, collapsed, unscorable, unscorable_message
from tests.helpers import trainer

DEAD = {"entropy": 0.0, "frac_reward_zero_std": 1.0, "reward": 0.0, "completions_truncated": 1.0}
ALIVE = {"entropy": 0.07, "frac_reward_zero_std": 0.25, "reward": 0.44, "completions_truncated": 0.0}


def test_collapsed_needs_low_entropy_and_no_reward_spread():
    assert collapsed(DEAD)
    assert not collapsed({**DEAD, "entropy": 0.01})  # still sampling
    assert not collapsed({**DEAD, "frac_reward_zero_std": 0.75})  # some group still has a spread
    assert not collapsed({"frac_reward_zero_std": 1.0})  # no entropy logged: no verdict
    assert collapsed({**DEAD, "entropy": 0.01}, entropy_below=0.1)


def test_the_watch_fires_once_after_three_collapsed_steps_in_a_row():
    watch = CollapseWatch(OptimizerConfig(learning_rate=10.0))
    steps = [ALIVE, DEAD, DEAD, ALIVE, DEAD, DEAD, DEAD, DEAD, DEAD, DEAD]  # a normal step resets the count
    fired = [step for step, m in enumerate(steps, start=1) if watch.observe(m, step) is not None]
    assert fired == [7]
    assert watch.warned and [s for s, _ in watch.run] == [8, 9, 10]


def test_the_warning_names_the_numbers_and_the_learning_rate():
    run = [(2, {**DEAD, "entropy": 6e-7}), (3, DEAD), (4, {**DEAD, "completions_truncated": 0.9})]
    text = collapse_message(run, OptimizerConfig(learning_rate=10.0, max_grad_norm=0.0))
    assert text.startswith("[infgrpo] the policy looks collapsed: steps 2-4 had mean token entropy <= 6e-07")
    assert "frac_reward_zero_std 1; reward 0, 0, 0; share of completions cut at max_new_tokens 1.00, 1.00, 0.90" in text
    assert "model.optimizer.learning_rate=10 is likely too high (lower it, e.g. to 1)" in text
    assert "model.optimizer.max_grad_norm=0 leaves the gradient unclipped" in text
    assert text.endswith("restart from a checkpoint older than step 1.")


def test_the_watch_warns_through_lightning_on_rank_zero():
    watch = CollapseWatch(OptimizerConfig())
    with pytest.warns(InfgrpoWarning, match="the policy looks collapsed: steps 1-3"):
        for step in (1, 2, 3):
            watch(DEAD, step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        watch(DEAD, 4)  # once


def test_a_normal_run_does_not_warn(tmp_path):
    module = GRPOModule(
        group_size=4, sampler=SamplerConfig(num_slots=4, max_new_tokens=16), optimizer=OptimizerConfig(1e-3)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer(tmp_path, 3).fit(module, PromptDataModule(path="tiny", batch_size=2, eval_size=8))
    assert not module.collapse.warned and module.collapse.run == []
    assert not [w for w in caught if "collapsed" in str(w.message)]


def test_unscorable_steps_warn_once_naming_on_error_and_the_functions():
    watch = CollapseWatch(OptimizerConfig(), RewardConfig(functions={"synthetic": 1.0}, on_error="skip"))
    nan = {**ALIVE, "reward": float("nan")}
    fired = [s for s, m in enumerate([nan, ALIVE, nan, nan, nan, nan], 1) if watch.observe_unscorable(m, s)]
    assert fired == [5]  # three in a row; a scored step resets the count
    text = unscorable_message(3, 5, watch.rewards)
    assert text.startswith("[infgrpo] no completion had a reward in steps 3-5: every reward function (synthetic)")
    assert "--model.rewards.on_error raise" in text
    assert not unscorable(ALIVE) and not unscorable({})


def test_a_run_whose_reward_never_applies_warns_at_each_step_and_once_that_nothing_trains(tmp_path):
    register_reward("unscored", lambda completions, **kwargs: [None] * len(completions))
    module = GRPOModule(
        group_size=2,
        sampler=SamplerConfig(num_slots=2, max_new_tokens=4),
        rewards=RewardConfig(functions={"unscored": 1.0}, accuracy=None),  # None needs no on_error
    )
    with pytest.warns(InfgrpoWarning) as seen:
        trainer(tmp_path, 3).fit(module, PromptDataModule(path="tiny", batch_size=1, eval_size=1))
    texts = [str(w.message) for w in seen if issubclass(w.category, InfgrpoWarning)]
    assert [t for t in texts if t.startswith("[infgrpo] no reward for 2 of 2 completions: every reward function")]
    assert [t for t in texts if "no completion had a reward in steps 1-3: every reward function (unscored" in t]
    assert all(t.startswith(("[infgrpo] no reward for", "[infgrpo] no completion had a reward")) for t in texts)
    assert module.collapse.warned_unscorable
