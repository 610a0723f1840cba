"""Scoring a multi-turn rollout (tools) as TRL 1.16 hands its rewards one: message lists, environments, get_reward.

The completions are real token ids of the tiny tokenizer: model turns ending on its EOS (``<|im_end|>``), tool
results between them (tool mask 0).
"""

import pytest
import torch

from infgrpo.agent.turns import Exchange
from infgrpo.sampler import Rollouts
from infgrpo.scoring import Scorer, score_rollouts

EOS = 2


class Counter:
    """An environment as TRL takes one: ``reset``, a tool method, and ``get_reward`` (None: no reward here)."""

    def reset(self, **row):
        self.calls = 0

    def increment(self, step: int) -> int:
        """Adds ``step`` to the count.

        Args:
            step: how much to add.
        """
        self.calls += step
        return self.calls

    def get_reward(self):
        return float(self.calls) if self.calls else None


def env_reward(environments, **kwargs):
    """What TRL adds for an environment class with ``get_reward`` (called with every reward keyword)."""
    assert "completions" in kwargs and "prompts" in kwargs
    return [e.get_reward() for e in environments]


def exchange_reward(completions, environments, answer, completion_ids, **kwargs):
    """A TRL reward of an agent: the exchange's messages, the environments and a column, by name."""
    assert all(isinstance(c, list) and c[0]["role"] == "assistant" for c in completions)
    assert all(isinstance(e, Counter) for e in environments)
    assert [len(ids) for ids in completion_ids] == [6, 2, 7, 4]  # every token, tool results included (TRL's)
    return [float(len(c) + (c[-1]["content"] == a)) for c, a in zip(completions, answer, strict=True)]


def text_length(completions, **kwargs):
    """A single-turn reward: the decoded text's length."""
    assert all(isinstance(c, str) for c in completions)
    return [len(c) for c in completions]


def turn(tokenizer, text, end=True):
    """A turn's token ids (the model's end with EOS)."""
    return tokenizer(text, add_special_tokens=False)["input_ids"] + ([EOS] if end else [])


@pytest.fixture
def exchange(tokenizer):
    """Two prompts x 2 samples: (rollouts, messages, environments)."""
    ids, masks, messages = [], [], []
    for first, result, last in [("ab", "5", "c"), ("a", None, None), ("ab", "7", "cd"), ("ab", "9", "")]:
        parts = [(turn(tokenizer, first), 1)]
        sample = [{"role": "assistant", "content": first}]
        if result is not None:
            parts.append((turn(tokenizer, result, end=False), 0))
            sample.append({"role": "tool", "name": "increment", "content": result})
        if last:
            parts.append((turn(tokenizer, last), 1))
            sample.append({"role": "assistant", "content": last})
        ids.append([t for p, _ in parts for t in p])
        masks.append([m for p, m in parts for _ in p])
        messages.append(sample)
    finish = ["stop", "stop", "stop", "length"]  # the last one ends in its tool result: cut at max_new_tokens
    rollouts = Rollouts([[5, 6], [7]], 2, ids, [torch.zeros(len(c)) for c in ids], finish, tool_masks=masks)
    environments = [Counter() for _ in ids]
    for env, calls in zip(environments, [1, 0, 2, 3], strict=True):
        env.reset()
        env.calls = calls
    return rollouts, messages, environments


ITEMS = [
    {"meta": {"answer": "c"}, "prompt": [{"role": "user", "content": "x"}]},
    {"meta": {"answer": "cd"}, "prompt": [{"role": "user", "content": "y"}]},
]


def test_rewards_get_the_exchange_and_the_environments_and_get_reward_is_a_source(tokenizer, exchange):
    rollouts, messages, environments = exchange
    scores = score_rollouts(
        tokenizer, rollouts, ITEMS, {f"{__name__}:exchange_reward": 0.5, "Counter": (env_reward, 1.0)}, "raise", 16,
        completions=messages, reward_kwargs={"environments": environments},
    )  # fmt: skip
    own = [3 + 1, 1 + 0, 3 + 1, 2 + 0]  # messages, plus 1 where the last message's content is the answer
    assert scores.parts[f"{__name__}:exchange_reward"].tolist() == own
    counter = scores.parts["Counter"]
    assert counter[[0, 2, 3]].tolist() == [1.0, 2.0, 3.0] and counter[1].isnan()  # None: left out, as TRL
    assert scores.total.tolist() == pytest.approx([0.5 * 4 + 1, 0.5 * 1, 0.5 * 4 + 2, 0.5 * 2 + 3])
    # the texts are still decoded (special tokens skipped), tool results included, for the logs
    assert scores.texts == ["ab5c", "a", "ab7cd", "ab9"]
    # lengths: the model's tokens (TRL's completions/*_length); truncated: TRL's clipped rule
    assert scores.lengths.tolist() == [sum(m) for m in rollouts.tool_masks] == [5, 2, 6, 3]
    assert scores.truncated.tolist() == [0, 0, 0, 1]


def test_the_scorer_passes_them_on_and_single_turn_scoring_is_unchanged(tokenizer, exchange):
    rollouts, messages, environments = exchange
    scorer = Scorer(tokenizer, {f"{__name__}:exchange_reward": 1.0}, "raise", 16)
    rollouts.exchanges = [Exchange(m, e) for m, e in zip(messages, environments, strict=True)]  # what turns record
    scores = scorer(rollouts, ITEMS)
    assert list(scores.parts) == [f"{__name__}:exchange_reward"] and scores.total.tolist() == [4, 1, 4, 2]
    with_source = Scorer(tokenizer, {f"{__name__}:exchange_reward": 1.0}, "raise", 16, sources={"C": (env_reward, 1)})
    assert with_source(rollouts, ITEMS).parts["C"][[0, 2, 3]].tolist() == [1.0, 2.0, 3.0]  # built once, each call
    single = Rollouts(rollouts.prompt_ids, 2, rollouts.completion_ids, rollouts.logprobs, rollouts.finish_reasons)
    plain = Scorer(tokenizer, {f"{__name__}:text_length": 1.0}, "raise", 16)(single, [{"meta": {}}] * 2)
    assert plain.total.tolist() == [4, 1, 5, 3]  # the decoded texts, as before
    assert plain.lengths.tolist() == [6, 2, 7, 4] and plain.truncated.tolist() == [0, 0, 0, 1]


def test_what_a_multi_turn_scoring_cannot_take_is_one_clear_line(tokenizer, exchange):
    rollouts, messages, environments = exchange
    reward = {f"{__name__}:exchange_reward": 1.0}
    with pytest.raises(ValueError, match=r"reward_kwargs\['environments'\] has 3 values for 4 completions"):
        score_rollouts(tokenizer, rollouts, ITEMS, reward, "raise", 16, reward_kwargs={"environments": [Counter()] * 3})
    with pytest.raises(ValueError, match=r"the completions given \(messages\) has 2 values for 4 completions"):
        score_rollouts(tokenizer, rollouts, ITEMS, reward, "raise", 16, completions=messages[:2])
    with pytest.raises(ValueError, match=r"the reward source 'synthetic' has the name of a reward function"):
        Scorer(tokenizer, {"synthetic": 1.0}, "raise", 16, sources={"synthetic": (env_reward, 1.0)})
