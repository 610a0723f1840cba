import math

import pytest

from infgrpo.rewards import RewardError, check_rewards, compute_rewards, resolve_reward


def boom(completions, metadata):
    raise RuntimeError("parser exploded")


def nan_on_second(completions, metadata):
    return [1.0, math.nan] + [0.0] * (len(completions) - 2)


def length_bonus(completions, metadata):
    return [len(c) / 10 for c in completions]


META = [{"prompt": "rev abc", "answer": "cba"}, {"prompt": "count 1 3", "answer": "1 2 3"}]


def test_synthetic_reward_exact_match():
    total, parts = compute_rewards({"synthetic": 1.0}, ["cba", "1 2"], META)
    assert total.tolist() == [1.0, 0.0]
    assert parts["synthetic"].tolist() == [1.0, 0.0]


def test_weighted_sum_and_user_callable_by_import_path():
    total, parts = compute_rewards({"synthetic": 2.0, f"{__name__}:length_bonus": 0.5}, ["cba", "1 2 3"], META)
    assert total.tolist() == pytest.approx([2.0 + 0.5 * 0.3, 2.0 + 0.5 * 0.5])
    assert set(parts) == {"synthetic", f"{__name__}:length_bonus"}


def test_raising_reward_names_the_function():
    with pytest.raises(RewardError, match=r"reward '.*:boom' raised RuntimeError: parser exploded"):
        compute_rewards({f"{__name__}:boom": 1.0}, ["a", "b"], META)
    total, _ = compute_rewards({f"{__name__}:boom": 1.0}, ["a", "b"], META, on_error="zero")
    assert total.tolist() == [0.0, 0.0]


def test_nan_reward_names_the_function_and_sample():
    with pytest.raises(RewardError, match=r"reward '.*nan_on_second' returned nan for sample 1 .*'1 2'"):
        compute_rewards({f"{__name__}:nan_on_second": 1.0}, ["a", "1 2"], META)
    total, _ = compute_rewards({f"{__name__}:nan_on_second": 1.0}, ["a", "1 2"], META, on_error="zero")
    assert total.tolist() == [1.0, 0.0]


def test_unknown_reward_names_are_clear_errors():
    with pytest.raises(ValueError, match="rewards: 'gsm9k' is not known; valid: synthetic"):
        resolve_reward("gsm9k")
    with pytest.raises(ValueError, match="cannot import 'nope.module:fn'"):
        resolve_reward("nope.module:fn")
    with pytest.raises(ValueError, match="at least one reward"):
        check_rewards({})
