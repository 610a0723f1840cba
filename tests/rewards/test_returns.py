"""A reward function returning something other than one float (or None) per completion is named, with what it
returned and what it must return, in every ``rewards.on_error`` mode; the numbers it may return are kept."""

import re

import numpy as np
import pytest
import torch

from infgrpo.rewards import RewardError, compute_rewards, score_rewards
from infgrpo.settings import InfgrpoWarning
from tests.helpers import ALLOW_02_REWARDS

META = [{"answer": "a"}, {"answer": "b"}]
CONTRACT = re.escape("must return a list of floats (or None per row), one per completion")


def verdicts(completions, metadata):
    return ["yes" for _ in completions]


def one_float(completions, metadata):
    return 1.0


def nothing(completions, metadata):
    return None


def a_string(completions, metadata):
    return "10"


def numbers_of_every_kind(completions, metadata):
    return [np.float32(0.5), torch.tensor(2.0)]


def a_tensor(completions, metadata):
    return torch.tensor([1.0, 0.0])


def one_none(completions, metadata):
    return [None, 1]


@ALLOW_02_REWARDS
@pytest.mark.parametrize("on_error", ["raise", "zero", "skip"])
def test_strings_name_the_reward_the_value_and_the_contract_in_every_mode(on_error):
    message = rf"reward '.*:verdicts' returned str 'yes' for completion 0 .*; it {CONTRACT}"
    with pytest.raises(RewardError, match=message):
        score_rewards({f"{__name__}:verdicts": 1.0}, ["a", "b"], META, on_error=on_error)


@pytest.mark.parametrize(
    "fn,what", [("one_float", "float 1.0"), ("nothing", "NoneType None"), ("a_string", "str '10'")]
)
@ALLOW_02_REWARDS
def test_a_scalar_or_none_instead_of_a_list_is_named_as_such(fn, what):
    with pytest.raises(RewardError, match=rf"reward '.*:{fn}' returned {what}; it {CONTRACT}"):
        compute_rewards({f"{__name__}:{fn}": 1.0}, ["a", "b"], META, on_error="skip")


@ALLOW_02_REWARDS
def test_numpy_and_tensor_numbers_and_none_per_row_are_the_contract():
    total, _ = compute_rewards({f"{__name__}:numbers_of_every_kind": 1.0}, ["a", "b"], META)
    assert total.tolist() == [0.5, 2.0]
    total, _ = compute_rewards({f"{__name__}:a_tensor": 1.0}, ["a", "b"], META)
    assert total.tolist() == [1.0, 0.0]
    with pytest.warns(InfgrpoWarning, match="no reward for 1 of 2 completions"):  # None: the row is left out
        scores = score_rewards({f"{__name__}:one_none": 1.0}, ["a", "b"], META, on_error="zero")
    assert scores.total.isnan().tolist() == [True, False] and scores.total[1] == 1.0 and not scores.failed.any()


def an_inf(completions, **kwargs):
    return [float("inf"), 1]


def test_an_infinite_reward_names_the_key_the_cli_takes():
    with pytest.raises(RewardError, match=r"Set rewards\.on_error: skip .*\(--model\.rewards\.on_error skip\)"):
        compute_rewards({f"{__name__}:an_inf": 1.0}, ["a", "b"], META)
