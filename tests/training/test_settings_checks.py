"""The rules that read several settings groups: each written once, the settings and the sampler refusing alike;
settings a run would ignore, and greedy groups that never have a gradient: one warning each, none for the shipped
configs."""

import re
import warnings
from pathlib import Path

import pytest
import yaml

from infgrpo.sampler import SamplerConfig
from infgrpo.sampler.engine.adaptive import check_grow_scheme, check_prompt_cap
from infgrpo.settings import ConfigError, InfgrpoWarning
from infgrpo.training.adaptive import AdaptiveGroupsConfig
from infgrpo.training.dynamic import DynamicSamplingConfig
from infgrpo.training.hparams import GROUPS, check_settings
from infgrpo.training.settings_checks import check_judged_batch, ignored_settings

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def built(**groups):
    settings = check_settings(**groups)
    return {key: getattr(settings, key) for key in GROUPS}


@pytest.mark.parametrize(
    "groups,named",
    [
        ({"dynamic_sampling": {"max_prompts": 64}}, "dynamic_sampling.max_prompts=64 is ignored: dynamic_sampling"),
        (
            {"adaptive_groups": {"enabled": True, "rule": "value_or_draw"}},
            "adaptive_groups.rule='value_or_draw' compares extending a group with drawing a new prompt",
        ),
        ({"quantization": {"upcast_to_float32": True}}, "quantization.upcast_to_float32=True is ignored"),
        ({"sampler": {"temperature": 0.0}}, "sampler.temperature=0 decodes greedily: the group_size=8 completions"),
        ({"sampler": {"top_k": 1}}, "sampler.top_k=1 decodes greedily"),
        ({"lora": {"target_modules": ["q_proj"]}}, "lora.target_modules=['q_proj'] is ignored: lora.r is 0"),
        ({"lora": {"alpha": 32, "dropout": 0.1}}, "lora.alpha=32, lora.dropout=0.1 are ignored: lora.r is 0"),
    ],
)
def test_each_ignored_value_is_named(groups, named):
    with pytest.warns(InfgrpoWarning, match=re.escape(named)):  # check_settings warns it
        settings = built(**groups)
    found = ignored_settings(settings, group_size=8)
    assert len(found) == 1 and found[0].startswith(named)


def test_the_settings_that_are_used_warn_nothing():
    on = {
        "dynamic_sampling": {"enabled": True, "max_prompts": 64}, "sampler": {"temperature": 0.7, "top_k": 20},
        "lora": {"r": 8, "target_modules": ["q_proj"], "alpha": 32},
        "adaptive_groups": {"enabled": True, "rule": "value_or_draw"},
    }  # fmt: skip
    assert ignored_settings(built(**on), group_size=8) == []


def test_the_warning_is_shown_once_although_the_settings_are_checked_twice():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(2):
            check_settings(sampler={"temperature": 0.0, "stop_token_ids": [7]})
    shown = [str(w.message) for w in caught if "[infgrpo]" in str(w.message)]
    assert len(shown) == 1 and "sampler.temperature=0" in shown[0]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_no_shipped_config_warns(path):
    model = yaml.safe_load(path.read_text())["model"]
    group_size = model.pop("group_size", 8)
    for key in ("output_dir", "seed", "threads"):
        model.pop(key, None)
    assert ignored_settings(built(**model), group_size) == []


def refusal(check, *args):
    with pytest.raises(ConfigError) as err:
        check(*args)
    return str(err.value)


@pytest.mark.parametrize(
    "groups,sampler_side",
    [
        (
            {"sampler": {"decoder": "hf_micro"}, "dynamic_sampling": {"enabled": True}},
            lambda: SamplerConfig(decoder="hf_micro").require_engine("dynamic_sampling"),
        ),
        (
            {"sampler": {"decoder": "hf_full"}, "adaptive_groups": {"enabled": True}},
            lambda: SamplerConfig(decoder="hf_full").require_engine("adaptive_groups"),
        ),
        (
            {"adaptive_groups": {"enabled": True, "max_samples_per_prompt": 4}},
            lambda: check_prompt_cap(4, 8),
        ),
        (
            {"adaptive_groups": {"enabled": True}, "dynamic_sampling": {"enabled": True, "scheme": "rounds"}},
            lambda: check_grow_scheme("rounds"),
        ),
    ],
)
def test_a_cross_setting_rule_refuses_with_the_same_line_in_the_settings_and_in_the_sampler(groups, sampler_side):
    assert refusal(lambda: check_settings(group_size=8, **groups)) == refusal(sampler_side)


def test_the_cap_and_the_budget_must_hold_one_batch():
    dynamic, adaptive = DynamicSamplingConfig(enabled=True, max_prompts=3), AdaptiveGroupsConfig(enabled=True)
    assert "dynamic_sampling.max_prompts=3 is below data.batch_size=4" in refusal(
        check_judged_batch, dynamic, AdaptiveGroupsConfig(), 8, 4
    )
    small = AdaptiveGroupsConfig(enabled=True, max_samples_per_step=16)
    assert "max_samples_per_step=16 is below data.batch_size x group_size=32" in refusal(
        check_judged_batch, DynamicSamplingConfig(), small, 8, 4
    )
    check_judged_batch(DynamicSamplingConfig(enabled=True), adaptive, 8, 4)  # the defaults hold any batch
