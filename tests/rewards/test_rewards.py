import math

import pytest

from infgrpo.rewards import RewardError, check_rewards, compute_rewards, resolve_reward, score_rewards
from tests.helpers import ALLOW_02_REWARDS


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


@ALLOW_02_REWARDS
def test_weighted_sum_and_user_callable_by_import_path():
    total, parts = compute_rewards({"synthetic": 2.0, f"{__name__}:length_bonus": 0.5}, ["cba", "1 2 3"], META)
    assert total.tolist() == pytest.approx([2.0 + 0.5 * 0.3, 2.0 + 0.5 * 0.5])
    assert set(parts) == {"synthetic", f"{__name__}:length_bonus"}


@ALLOW_02_REWARDS
def test_raising_reward_names_the_function():
    with pytest.raises(RewardError, match=r"reward '.*:boom' raised RuntimeError: parser exploded"):
        compute_rewards({f"{__name__}:boom": 1.0}, ["a", "b"], META)
    total, _ = compute_rewards({f"{__name__}:boom": 1.0}, ["a", "b"], META, on_error="zero")
    assert total.tolist() == [0.0, 0.0]


@ALLOW_02_REWARDS
def test_nan_reward_names_the_function_and_sample():
    with pytest.raises(RewardError, match=r"reward '.*nan_on_second' returned nan for sample 1 .*'1 2'"):
        compute_rewards({f"{__name__}:nan_on_second": 1.0}, ["a", "1 2"], META)
    total, _ = compute_rewards({f"{__name__}:nan_on_second": 1.0}, ["a", "1 2"], META, on_error="zero")
    assert total.tolist() == [1.0, 0.0]


def test_unknown_reward_names_are_clear_errors():
    with pytest.raises(
        ValueError,
        match="rewards: .gsm9k. is not known; valid: format, gsm8k, math, numeric, overlong, reasoning_gym, synthetic",
    ):
        resolve_reward("gsm9k")
    with pytest.raises(ValueError, match="cannot import 'nope.module:fn'"):
        resolve_reward("nope.module:fn")
    with pytest.raises(ValueError, match="at least one reward"):
        check_rewards({})


def test_numeric_extraction_gsm8k_boxed_last_number_commas_units():
    from infgrpo.rewards.math import extract_number

    assert extract_number("so 3 + 4 = 7.\n#### 1,234") == 1234.0
    assert extract_number(r"The answer is \boxed{$42.50}") == 42.5
    assert extract_number("about 12 apples and 15 pears") == 15.0
    assert extract_number("#### -3 dollars") == -3.0
    assert extract_number("no digits here") is None
    meta = [{"answer": "Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72"}] * 4
    total, _ = compute_rewards({"gsm8k": 1.0}, ["#### 72", r"\boxed{72.0}", "It is 72 clips", "#### 71"], meta)
    assert total.tolist() == [1.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize(
    "text,value",
    [
        (r"so \boxed{1{,}000}", 1000.0),  # LaTeX thousands separator inside the box
        (r"\boxed{1\,000}", 1000.0),
        (r"\boxed{\frac{1}{2}}", 0.5),  # nested braces: the box, not the last number (2)
        (r"\boxed{-\dfrac{3}{4}} at last", -0.75),
        (r"\boxed{12\%}", 12.0),
        ("pages 10-20", 20.0),  # a hyphen between numbers is no minus sign
        ("in 2023-2024", 2024.0),
        ("items 1,2,3", 3.0),  # commas that do not group thousands separate numbers
        ("\u22125 degrees", -5.0),  # Unicode minus
        ("x = -7.", -7.0),
    ],
)
def test_numeric_extraction_latex_and_separators(text, value):
    from infgrpo.rewards.math import extract_number

    assert extract_number(text) == pytest.approx(value)


def brevity(completions, metadata, completion_lengths):
    return [-n / 10 for n in completion_lengths]


def budget_used(completions, metadata, max_completion_length=None):
    return [float(max_completion_length or -1)] * len(completions)


def everything(completions, metadata, **info):
    return [float(len(info))] * len(completions)


@ALLOW_02_REWARDS
def test_reward_functions_receive_the_extras_they_name():
    kw = dict(completion_lengths=[3, 5], max_completion_length=8)
    rewards = {f"{__name__}:{f}": 1.0 for f in ("brevity", "budget_used", "everything")}
    _, parts = compute_rewards(rewards, ["a", "b"], [{}, {}], **kw)
    assert parts[f"{__name__}:brevity"].tolist() == pytest.approx([-0.3, -0.5])
    assert parts[f"{__name__}:budget_used"].tolist() == [8.0, 8.0]
    assert parts[f"{__name__}:everything"].tolist() == [2.0, 2.0]


def test_format_reward():
    total, _ = compute_rewards(
        {"format": 1.0},
        ["<think>a</think> <answer>5</answer>", "<answer>5</answer>", "x <think></think><answer>1</answer>"],
        [{}] * 3,
    )
    assert total.tolist() == [1.0, 0.0, 0.0]


def test_overlong_penalty_receives_token_lengths():
    total, _ = compute_rewards(
        {"overlong": 1.0}, ["a"] * 3, [{}] * 3, completion_lengths=[10, 80, 100], max_completion_length=100
    )
    assert total.tolist() == pytest.approx([0.0, -0.2, -1.0])
    with pytest.raises(RewardError, match="reward 'overlong' raised ValueError: the overlong reward needs"):
        compute_rewards({"overlong": 1.0}, ["a"], [{}])


def none_on_second(completions, metadata):
    return [1.0, None] + [0.0] * (len(completions) - 2)


@ALLOW_02_REWARDS
def test_skip_keeps_a_failed_reward_nan_and_counts_it():
    scores = score_rewards({f"{__name__}:none_on_second": 1.0}, ["a", "b", "c"], META + META[:1], on_error="skip")
    total, parts, failed = scores.total, scores.parts, scores.failed
    assert total[0] == 1.0 and math.isnan(total[1]) and total[2] == 0.0
    assert math.isnan(parts[f"{__name__}:none_on_second"][1])
    assert failed.tolist() == [False, True, False]


def test_skip_sums_the_rewards_that_did_not_fail_as_trl_does():
    # TRL: nansum of the weighted functions; a row is unscorable only when every function failed
    rewards = {f"{__name__}:none_on_second": 1.0, f"{__name__}:length_bonus": 2.0}
    scores = score_rewards(rewards, ["abcde", "ab"], META, on_error="skip")
    total, _, failed = scores.total, scores.parts, scores.failed
    assert total.tolist() == pytest.approx([1.0 + 2.0 * 0.5, 2.0 * 0.2])
    assert failed.tolist() == [False, True]
    total, _ = compute_rewards({f"{__name__}:boom": 1.0}, ["a", "b"], META, on_error="skip")
    assert total.isnan().all()


def test_zero_scores_a_failed_reward_zero_and_counts_it():
    scores = score_rewards({f"{__name__}:none_on_second": 1.0}, ["a", "b"], META, on_error="zero")
    assert scores.total.tolist() == [1.0, 0.0] and scores.failed.tolist() == [False, True]


def test_unknown_on_error_names_its_key_and_the_valid_choices():
    with pytest.raises(ValueError, match=r"rewards\.on_error='ignore' is not known; valid: raise, zero, skip"):
        compute_rewards({"synthetic": 1.0}, ["a"], META[:1], on_error="ignore")
