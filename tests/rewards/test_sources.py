"""``partial(module:function, key=literal, ...)``: a reward function with keyword arguments bound, never called
until scoring (the recipes' service rewards), beside the factory call, which is called once."""

import sys

import pytest

from infgrpo.rewards import score_rewards
from infgrpo.rewards.config import RewardConfig
from infgrpo.rewards.core import resolve_reward
from infgrpo.settings import ConfigError

CALLS: list[dict] = []


def service_reward(completions, num_parallel=2, provider_type="e2b", **kwargs):
    """Scores 1.0 per completion and records its call (as the recipe's code_reward is called)."""
    CALLS.append({"num_parallel": num_parallel, "provider_type": provider_type, **kwargs})
    return [1.0] * len(completions)


def strict_reward(completions, test_batch_size=1):
    return [float(test_batch_size)] * len(completions)


@pytest.fixture(autouse=True)
def calls():
    CALLS.clear()
    yield CALLS
    CALLS.clear()


def test_partial_binds_keywords_without_calling_and_each_score_calls_with_them():
    name = f"partial({__name__}:service_reward, num_parallel=3, provider_type='morph')"
    fn = resolve_reward(name)
    assert CALLS == [] and fn.__name__ == "service_reward"  # bound, not called
    RewardConfig(functions={name: 1.0}, accuracy=None)  # the settings take it
    rows = [{"prompt": [{"role": "user", "content": "q"}], "verification_info": {"language": "python"}}] * 2
    scores = score_rewards({name: 1.0}, ["a", "b"], rows)
    assert scores.total.tolist() == [1.0, 1.0]
    assert CALLS[0]["num_parallel"] == 3 and CALLS[0]["provider_type"] == "morph"
    assert CALLS[0]["verification_info"] == [{"language": "python"}] * 2  # TRL's columns still arrive by keyword
    score_rewards({name: 1.0}, ["c"], rows[:1])
    assert len(CALLS) == 2  # called at each scoring, as the recipe's partial is


def test_a_factory_call_is_called_once_a_partial_never_early():
    made = resolve_reward(f"{__name__}:strict_reward")
    assert made([["x"]]) == [1.0]
    assert resolve_reward(f"partial({__name__}:strict_reward, test_batch_size=-1)")([["x"]]) == [-1.0]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("partial(TESTS:strict_reward, scoring_mode='partial')", "got an unexpected keyword argument 'scoring_mode'"),
        ("partial(TESTS:strict_reward, 3)", "only keyword arguments are bound"),
        ("partial(TESTS:strict_reward, n=int)", "with literal keyword arguments"),
        ("partial(strict_reward, n=1)", "binds 'strict_reward', which is no module:function"),
        ("partial(TESTS:missing, n=1)", "cannot import"),
    ],
)
def test_bad_partials_are_one_line_naming_the_key(name, says):
    name = name.replace("TESTS", __name__)
    with pytest.raises(ConfigError, match="functions") as err:
        RewardConfig(functions={name: 1.0}, accuracy=None)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_module_is_importable_as_the_tests_name():
    assert sys.modules[__name__].service_reward is service_reward
