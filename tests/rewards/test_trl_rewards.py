"""Reward functions written for TRL 1.16 run unchanged: TRL's call, TRL's own rewards, logging, async, 0.2's call."""

import asyncio

import pytest
import torch
from trl.rewards import (
    accuracy_reward,
    get_repetition_penalty_reward,
    get_soft_overlong_punishment,
    think_format_reward,
)

from infgrpo.rewards import RewardError, TrainerState, register_reward, score_rewards
from infgrpo.rewards.config import RewardConfig
from infgrpo.settings import ConfigError, InfgrpoFutureWarning

TEXTS = [
    r"<think>3 and 4</think> The answer is \boxed{7}.",
    r"It is \boxed{8}",
    "<think>hmm</think><think>again</think> 7",
    r"$\frac{1}{2}$ and \boxed{0.5}",
]
SOLUTIONS = ["7", "7", "7", r"\frac{1}{2}"]
IDS = [[5, 6, 5, 6, 5, 6], [1, 2, 3], [9] * 11, [4, 4]]
OVERLONG = "trl.rewards:get_soft_overlong_punishment(max_completion_len=10, soft_punish_cache=4)"
REPEAT = "trl.rewards:get_repetition_penalty_reward(ngram_size=2, max_penalty=-0.5)"


def f32(values):
    return torch.tensor(values, dtype=torch.float32).tolist()


def rows(conversational: bool):
    prompt = [{"role": "user", "content": "What is 3+4?"}] if conversational else "What is 3+4?"
    return [{"prompt": prompt, "solution": s, "level": i} for i, s in enumerate(SOLUTIONS)]


def score(rewards, conversational=True, **kw):
    kw.setdefault("on_error", "skip")
    return score_rewards(rewards, TEXTS, rows(conversational), completion_ids=IDS, **kw)


def test_trls_own_rewards_give_trls_values_on_conversational_rows():
    messages = [[{"role": "assistant", "content": t}] for t in TEXTS]
    want = {
        "trl.rewards:accuracy_reward": accuracy_reward(messages, SOLUTIONS),
        "trl.rewards:think_format_reward": think_format_reward(messages),
        OVERLONG: get_soft_overlong_punishment(10, 4)(IDS),
        REPEAT: get_repetition_penalty_reward(2, -0.5)(IDS),
    }
    scores = score(dict.fromkeys(want, 1.0))
    assert {k: v.tolist() for k, v in scores.parts.items()} == {k: f32(v) for k, v in want.items()}  # TRL: float32
    assert want["trl.rewards:accuracy_reward"] == [1.0, 0.0, 0.0, 1.0]  # a case each way: the test can fail
    assert scores.log.extra["solution"] == SOLUTIONS  # accuracy_reward's log_extra columns reach the table
    assert len(scores.log.extra["gold_parsed"]) == len(TEXTS)


def test_on_standard_rows_completions_are_strings_as_trl_gives_them():
    scores = score({OVERLONG: 1.0, REPEAT: 2.0}, conversational=False)
    assert scores.total.tolist() == pytest.approx(
        [
            a + 2 * b
            for a, b in zip(
                get_soft_overlong_punishment(10, 4)(IDS), get_repetition_penalty_reward(2, -0.5)(IDS), strict=True
            )
        ]
    )
    with pytest.raises(TypeError):  # TRL's accuracy_reward reads completion[0]["content"]: chat completions only
        accuracy_reward(TEXTS, SOLUTIONS)
    with pytest.raises(RewardError, match="reward 'trl.rewards:accuracy_reward' raised TypeError"):
        score({"trl.rewards:accuracy_reward": 1.0}, conversational=False, on_error="raise")


def test_none_is_trls_unscorable_value():
    unparseable = [{"prompt": [{"role": "user", "content": "?"}], "solution": "no math here"}] * len(TEXTS)
    scores = score_rewards({"trl.rewards:accuracy_reward": 1.0}, TEXTS, unparseable, on_error="skip")
    assert scores.total.isnan().all() and scores.failed.all()


def seen(prompts, completions, completion_ids, level, trainer_state, log_metric, **kwargs):
    """Records what TRL's call gave it."""
    seen.calls = dict(prompts=prompts, completions=completions, ids=completion_ids, level=level, state=trainer_state)
    seen.extra = kwargs
    log_metric("level_mean", sum(level) / len(level))
    return [float(x) for x in level]


def test_the_call_gives_prompts_columns_ids_and_state_by_keyword():
    state = TrainerState(global_step=3, max_steps=10, epoch=0.5)
    scores = score({f"{__name__}:seen": 1.0}, trainer_state=state, completion_lengths=[6, 3, 11, 2])
    got = seen.calls
    assert got["prompts"] == [r["prompt"] for r in rows(True)] and got["level"] == [0, 1, 2, 3]
    assert got["completions"][1] == [{"role": "assistant", "content": TEXTS[1]}] and got["ids"] == IDS
    assert got["state"] is state and "prompt" not in seen.extra  # the prompt arrives as prompts, as TRL
    assert seen.extra["solution"] == SOLUTIONS and seen.extra["completion_lengths"] == [6, 3, 11, 2]
    assert scores.log.means() == {"level_mean": 1.5} and scores.total.tolist() == [0.0, 1.0, 2.0, 3.0]


class Flag:
    """An asyncio.Event made on the loop that first uses it (the rewards' own loop)."""

    def __init__(self):
        self.event = None

    def get(self):
        self.event = self.event or asyncio.Event()
        return self.event


FLAG = Flag()


async def ping(completions, **kwargs):
    await asyncio.wait_for(FLAG.get().wait(), timeout=10)  # only pong sets it: pong must run meanwhile
    return [1.0] * len(completions)


async def pong(completions, **kwargs):
    await asyncio.sleep(0.01)
    FLAG.get().set()
    return [2.0] * len(completions)


def test_async_rewards_run_concurrently():
    # ping waits for an event only pong sets: run one after the other, ping would time out (a RewardError)
    scores = score({f"{__name__}:ping": 1.0, f"{__name__}:pong": 1.0}, on_error="raise")
    assert scores.total.tolist() == [3.0] * len(TEXTS)


def test_factories_from_python_and_bad_factory_strings():
    name = register_reward("overlong_10_4", get_soft_overlong_punishment(10, 4))
    RewardConfig(functions={name: 1.0}, accuracy=None)
    assert score({name: 1.0}).total.tolist() == get_soft_overlong_punishment(10, 4)(IDS)
    with pytest.raises(ConfigError, match="not a factory call with literal arguments"):
        RewardConfig(functions={"trl.rewards:get_soft_overlong_punishment(max_completion_len=n)": 1.0}, accuracy=None)
    with pytest.raises(ConfigError, match="raised ValueError: max_penalty 1 should not be positive"):
        RewardConfig(functions={"trl.rewards:get_repetition_penalty_reward(max_penalty=1)": 1.0}, accuracy=None)


def old_style(completions, metadata, **info):
    return [float(m["level"]) for m in metadata]


def test_infgrpo_02_rewards_are_served_with_a_warning_saying_how_to_port():
    with pytest.warns(InfgrpoFutureWarning, match="infgrpo 0.2's convention, served until 0.4; port it to TRL's"):
        scores = score({f"{__name__}:old_style": 1.0})
    assert scores.total.tolist() == [0.0, 1.0, 2.0, 3.0]
