import math

import pytest

from infgrpo.rewards import RewardError, check_rewards, compute_rewards, register_reward, resolve_reward, score_rewards
from infgrpo.settings import ConfigError, InfgrpoWarning
from tests.helpers import ALLOW_02_REWARDS


def boom(completions, metadata):
    raise RuntimeError("parser exploded")


def nan_on_second(completions, metadata):
    return [1.0, math.nan] + [0.0] * (len(completions) - 2)


def inf_on_second(completions, **kwargs):
    return [1.0, -math.inf] + [0.0] * (len(completions) - 2)


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
    with pytest.raises(RewardError, match=r"reward '.*:boom' raised RuntimeError: parser exploded \(set rewards"):
        compute_rewards({f"{__name__}:boom": 1.0}, ["a", "b"], META)
    with pytest.warns(InfgrpoWarning, match=r"reward '.*:boom' raised RuntimeError: parser exploded for 2 of 2 "):
        total, _ = compute_rewards({f"{__name__}:boom": 1.0}, ["a", "b"], META, on_error="zero")
    assert total.tolist() == [0.0, 0.0]


def test_an_infinite_reward_names_the_function_and_sample():
    with pytest.raises(RewardError, match=r"reward '.*inf_on_second' returned -inf for sample 1 .*'1 2'"):
        compute_rewards({f"{__name__}:inf_on_second": 1.0}, ["a", "1 2"], META)
    with pytest.warns(InfgrpoWarning, match=r"returned -inf for 1 of 2 completions: rewards.on_error=zero scored 0"):
        total, _ = compute_rewards({f"{__name__}:inf_on_second": 1.0}, ["a", "1 2"], META, on_error="zero")
    assert total.tolist() == [1.0, 0.0]


@ALLOW_02_REWARDS
@pytest.mark.parametrize("on_error", ["raise", "zero", "skip"])
def test_nan_is_none_as_in_trl_whatever_on_error_says(on_error):
    rewards = {f"{__name__}:nan_on_second": 1.0, f"{__name__}:length_bonus": 2.0}
    scores = score_rewards(rewards, ["abcde", "ab"], META, on_error=on_error)
    assert scores.total.tolist() == pytest.approx([1.0 + 2.0 * 0.5, 2.0 * 0.2])
    assert not scores.failed.any()


def test_unknown_reward_names_are_clear_errors():
    with pytest.raises(
        ValueError,
        match="rewards: .gsm9k. is not known; valid: format, gsm8k, math, numeric, open_r1_accuracy, .*, overlong, "
        "reasoning_gym, synthetic",
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


def none_on_second(completions, **kwargs):
    return [1.0, None] + [0.0] * (len(completions) - 2)


def none_on_first_two(completions, **kwargs):
    return [None, None] + [0.5] * (len(completions) - 2)


@pytest.mark.parametrize("on_error", ["raise", "zero", "skip"])
def test_none_leaves_the_function_out_of_the_row_with_no_setting(on_error):
    # TRL: nansum of the weighted functions; a None is no failure, whatever on_error says
    rewards = {f"{__name__}:none_on_second": 1.0, f"{__name__}:length_bonus": 2.0}
    scores = score_rewards(rewards, ["abcde", "ab"], META, on_error=on_error)
    assert scores.total.tolist() == pytest.approx([1.0 + 2.0 * 0.5, 2.0 * 0.2])
    assert math.isnan(scores.parts[f"{__name__}:none_on_second"][1])
    assert scores.failed.tolist() == [False, False]


def test_a_row_no_function_applies_to_is_nan_and_warns_at_once():
    rewards = {f"{__name__}:none_on_second": 1.0, f"{__name__}:none_on_first_two": 1.0}
    with pytest.warns(InfgrpoWarning, match=r"no reward for 1 of 3 completions: every reward function \(.*none_on_"
                      r"second, .*none_on_first_two\) returned None \(or failed\) for them \(first: completion 'b' of "
                      r"the row \{'prompt': 'count 1 3'.*advantage is 0 \((\d+) such completions so far"):  # fmt: skip
        scores = score_rewards(rewards, ["a", "b", "c"], META + META[:1])
    assert scores.total[0] == 1.0 and math.isnan(scores.total[1]) and scores.total[2] == 0.5
    assert not scores.failed.any()


@ALLOW_02_REWARDS
def test_skip_leaves_a_raising_reward_out_and_warns_with_the_count_each_time():
    rewards = {f"{__name__}:boom": 1.0, f"{__name__}:length_bonus": 2.0}
    counts = []
    for _ in range(2):
        with pytest.warns(InfgrpoWarning, match=r"raised RuntimeError: parser exploded for 2 of 2 completions: "
                          r"rewards.on_error=skip left out of their rewards \(\d+ failed values") as seen:  # fmt: skip
            scores = score_rewards(rewards, ["abcde", "ab"], META, on_error="skip")
        counts.append(int(str(seen[0].message).split("(")[-1].split()[0]))
        assert scores.total.tolist() == pytest.approx([2.0 * 0.5, 2.0 * 0.2]) and scores.failed.all()
    assert counts[1] == counts[0] + 2  # the running count: a new line each time


@ALLOW_02_REWARDS
def test_skip_of_the_only_reward_leaves_rows_unscorable_with_both_warnings():
    with pytest.warns(InfgrpoWarning) as seen:
        total, _ = compute_rewards({f"{__name__}:boom": 1.0}, ["a", "b"], META, on_error="skip")
    assert total.isnan().all()
    assert [str(w.message).split(" ")[1] for w in seen] == ["reward", "no"]  # the failure, then the rows


def test_register_reward_refuses_a_built_ins_name_and_replaces_its_own():
    with pytest.raises(ConfigError, match=r"register_reward\('synthetic', ...\): 'synthetic' is a built-in reward "
                       r"\(built-ins: .*\) and is not replaced; register yours under another name, e.g. "
                       r"register_reward\('my_synthetic', ...\)"):  # fmt: skip
        register_reward("synthetic", length_bonus)
    assert resolve_reward("synthetic") is not length_bonus
    register_reward("my_length", length_bonus)
    register_reward("my_length", boom)  # a user's own name: registering again replaces it
    assert resolve_reward("my_length") is boom


def test_unknown_on_error_names_its_key_and_the_valid_choices():
    with pytest.raises(ValueError, match=r"rewards\.on_error='ignore' is not known; valid: raise, zero, skip"):
        compute_rewards({"synthetic": 1.0}, ["a"], META[:1], on_error="ignore")
