"""score_rollouts and Scores.gather: named per-completion scores, gathered over ranks in global order."""

import math

import pytest
import torch

from infgrpo.runtime.ranks import Ranks
from infgrpo.sampler import Rollouts
from infgrpo.scoring import score_rollouts
from infgrpo.settings import InfgrpoWarning


def length_reward(completions, ok, completion_ids, log_extra, log_metric, **kwargs):
    """TRL's convention: the ``ok`` column by name; logs a table column and a metric."""
    assert all(len(ids) == len(c) for ids, c in zip(completion_ids, completions, strict=True))  # 1 char, 1 token
    log_extra("chars", [len(c) for c in completions])
    log_metric("mean_chars", sum(map(len, completions)) / len(completions))
    return [len(c) / 10 if good else None for c, good in zip(completions, ok, strict=True)]


def test_rollouts_are_decoded_scored_per_prompt_and_gathered_by_name(tokenizer):
    texts = ["ab", "abcd", "a", "abc"]
    completions = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    rollouts = Rollouts([[5, 6], [7]], 2, completions, [torch.zeros(len(c)) for c in completions],
                        ["stop", "length", "stop", "stop"])  # fmt: skip
    items = [{"meta": {"ok": True}}, {"meta": {"ok": False}}]  # prompt 1's reward does not apply: None, as in TRL
    with pytest.warns(InfgrpoWarning, match=r"no reward for 2 of 4 completions"):  # said at once, not at step 3
        scores = score_rollouts(tokenizer, rollouts, items, {f"{__name__}:length_reward": 2.0}, "skip", 4)
    assert scores.texts == texts
    assert scores.extra == {"chars": [2, 4, 1, 3]} and scores.metrics == {"mean_chars": 2.5}
    assert scores.total[:2].tolist() == pytest.approx([0.4, 0.8]) and scores.total[2:].isnan().all()
    assert scores.lengths.tolist() == [2, 4, 1, 3] and scores.truncated.tolist() == [0, 1, 0, 0]
    assert scores.failed.tolist() == [0, 0, 0, 0]  # a None is no failure (failures: exceptions and inf)
    # two ranks: the other one holds the same rows; gathered in rank order, columns keep their names
    ranks = Ranks(2, 1, lambda x: torch.stack([x + 100, x]))
    batch = scores.gather(ranks)
    assert batch.lengths.tolist() == [102, 104, 101, 103, 2, 4, 1, 3]
    assert batch.truncated.tolist() == [100, 101, 100, 100, 0, 1, 0, 0]
    part = batch.parts[f"{__name__}:length_reward"]
    assert part[4:6].tolist() == pytest.approx([0.2, 0.4]) and math.isnan(part[7])
    assert scores.gather(Ranks()).total[:2].tolist() == scores.total[:2].tolist()
