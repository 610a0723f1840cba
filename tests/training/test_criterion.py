"""A dynamic-sampling criterion must return a bool: anything else, or an exception, names the criterion and what it
returned, where ``bool("no")`` would have kept every group."""

import numpy as np
import pytest
import torch

from infgrpo.assets import resolve_model_path
from infgrpo.policy.load import load_tokenizer
from infgrpo.sampler.schedule.sequence import Sequence
from infgrpo.scoring import Scorer, Scores
from infgrpo.training.dynamic import CriterionError, judge, resolve_criterion
from infgrpo.training.judged_rollout import GroupJudge


def says_no(scores):
    return "no"


def counts(scores):
    return int((scores.total > 0).sum())


def looks_up(scores):
    return {}["spread"]


def numpy_spread(scores):
    return np.bool_(scores.total.std() > 0)


def tensor_spread(scores):
    return scores.total.max() > scores.total.min()


SCORES = Scores(
    total=torch.tensor([1.0, 0.0]), lengths=torch.ones(2), truncated=torch.zeros(2), failed=torch.zeros(2), parts={}
)


@pytest.mark.parametrize("fn,what", [(says_no, "str 'no'"), (counts, "int 1")])
def test_a_criterion_returning_no_bool_is_named_with_its_value(fn, what):
    with pytest.raises(CriterionError, match=rf"dynamic_sampling.criterion 'x:{fn.__name__}' returned {what}; it must"):
        judge(fn, f"x:{fn.__name__}", SCORES)


def test_a_criterion_that_raises_is_named():
    with pytest.raises(CriterionError, match=r"dynamic_sampling.criterion 'x:looks_up' raised KeyError: 'spread'"):
        judge(looks_up, "x:looks_up", SCORES)


def test_python_numpy_and_0_dim_tensor_bools_are_bools():
    assert judge(numpy_spread, "n", SCORES) is True and judge(tensor_spread, "t", SCORES) is True
    assert judge(resolve_criterion("reward_spread"), "reward_spread", SCORES) is True


def test_the_judge_of_a_rollout_names_the_criterion_of_the_settings():
    tokenizer = load_tokenizer(str(resolve_model_path("tiny")))
    scorer = Scorer(tokenizer, {"synthetic": 1.0}, on_error="raise", max_completion_length=4)
    items = [{"prompt_ids": [1, 2], "meta": {"prompt": "rev ab", "answer": "ba"}}]
    group = [Sequence(0, j, token_ids=[5, 6], logprobs=[-1.0, -1.0], finish_reason="stop") for j in range(2)]
    judge_ = GroupJudge(scorer, f"{__name__}:says_no", items)
    with pytest.raises(CriterionError, match=rf"criterion '{__name__}:says_no' returned str 'no'"):
        judge_.spread(0, group)
