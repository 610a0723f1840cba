"""Settings the command line takes and that then do nothing: one warning each, none for the shipped configs."""

from pathlib import Path

import pytest
import yaml

from infgrpo.training.hparams import check_settings
from infgrpo.training.preflight.no_effect import data_no_effect, eval_split_unused, no_effect

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs").glob("*.yaml"))


@pytest.mark.parametrize(
    "groups,named",
    [
        ({"adaptive_groups": {"max_samples_per_prompt": 32, "rule": "uniform"}},
         "model.adaptive_groups.max_samples_per_prompt=32, model.adaptive_groups.rule='uniform' are ignored"),
        ({"adaptive_groups": {"enabled": True, "max_samples_per_prompt": 8}},
         "model.adaptive_groups.max_samples_per_prompt=8 equals model.group_size=8: a prompt starts with group_size"),
        ({"rewards": {"functions": {"synthetic": 1.0, "format": 0.0}}},
         "model.rewards.functions['format']=0 adds nothing to the reward"),
        ({"rewards": {"functions": {"synthetic": 0.0}}},
         "model.rewards.functions={'synthetic': 0.0}: every weight is 0, so every completion's reward is 0"),
        ({"agent": {"max_turns": 2}},
         "model.agent.max_turns=2 does nothing: neither model.agent.tools nor model.agent.environment is set, so no "
         "completion calls a tool"),
        ({"agent": {"max_turns": 2, "tool_timeout": 5}},
         "model.agent.max_turns=2, model.agent.tool_timeout=5 do nothing: neither"),
    ],
)  # fmt: skip
def test_each_setting_that_does_nothing_is_named(groups, named):
    found = no_effect(check_settings(**groups), {"path": "tiny"})
    assert len(found) == 1 and found[0].startswith(named), found


def test_a_zero_weight_reward_kept_for_accuracy_warns_nothing():
    rewards = {"functions": {"format": 1.0, "synthetic": 0.0}, "accuracy": "synthetic"}
    assert no_effect(check_settings(rewards=rewards), {"path": "tiny"}) == []


def test_config_name_warns_for_local_data_and_tasks_only(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"prompt": "rev ab"}\n')
    assert "data.path='tiny' is local data" in data_no_effect({"path": "tiny", "config_name": "main"})[0]
    assert "is local data" in data_no_effect({"path": str(tmp_path / "train.jsonl"), "config_name": "main"})[0]
    assert "is a reasoning-gym task" in data_no_effect({"path": "reasoning_gym:chain_sum", "config_name": "x"})[0]
    assert data_no_effect({"path": "openai/gsm8k", "config_name": "main"}) == []


def test_eval_fraction_over_data_with_its_own_eval_split_says_that_split_goes_unused(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"prompt": "rev ab"}\n')
    assert eval_split_unused({"path": str(tmp_path), "eval_fraction": 0.1}) == []  # no eval file: nothing unused
    (tmp_path / "eval.jsonl").write_text('{"prompt": "rev ba"}\n')
    found = eval_split_unused({"path": str(tmp_path), "eval_fraction": 0.1})
    assert len(found) == 1 and found[0].startswith(
        f"data.eval_fraction=0.1 holds out 10% of the training rows for evaluation, so data.path={str(tmp_path)!r}'s "
        "own held-out split 'eval' (eval.jsonl) goes unused: set data.eval_fraction 0"
    ), found
    assert "(eval.jsonl) goes unused" in eval_split_unused({"path": "tiny", "eval_fraction": 0.2})[0]
    assert eval_split_unused({"path": "tiny", "eval_fraction": 0.2, "eval_split": None}) == []  # said: no warning
    assert eval_split_unused({"path": str(tmp_path / "train.jsonl"), "eval_fraction": 0.1}) == []  # one file


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_no_shipped_config_warns(path):
    config = yaml.safe_load(path.read_text())
    model = {k: v for k, v in config["model"].items() if k not in ("output_dir", "seed", "threads")}
    assert no_effect(check_settings(**model), config["data"]) == []
