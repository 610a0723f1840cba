"""Reward functions written for TRL 1.16 run unchanged: TRL's call, TRL's own rewards, logging, async, 0.2's call."""

import asyncio
import logging
import math
from types import SimpleNamespace

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
from infgrpo.settings import ConfigError, InfgrpoFutureWarning, InfgrpoWarning

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
    with pytest.warns(InfgrpoWarning, match="no reward for 4 of 4 completions"):
        scores = score_rewards({"trl.rewards:accuracy_reward": 1.0}, TEXTS, unparseable)
    assert scores.total.isnan().all() and not scores.failed.any()  # no setting: None is no failure


def trl_rewards_per_function(functions, rows, completions):
    """TRL 1.16's own ``GRPOTrainer._calculate_rewards`` (one process) on ``rows``: (N, functions) float32, NaN where
    a function returned None; run on a stand-in trainer that holds what the method reads."""
    from accelerate import PartialState
    from trl.trainer.grpo_trainer import GRPOTrainer

    PartialState(cpu=True)  # TRL's logger needs accelerate's state
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(device=torch.device("cpu"), is_main_process=True),
        reward_funcs=list(functions),
        reward_processing_classes=[None] * len(functions),
        reward_func_names=[f.__name__ for f in functions],
        state=SimpleNamespace(global_step=0),
        args=SimpleNamespace(report_to=[]),
        environments=None,
        _log_completion_extra=lambda column, values: None,
        _log_metric=lambda name, value: None,
    )
    prompts = [row["prompt"] for row in rows]
    return GRPOTrainer._calculate_rewards(trainer, rows, prompts, completions, [[1]] * len(rows))


def trl_totals(per_function, weights):
    """TRL 1.16's combination (``_generate_and_score_completions``, sum_then_normalize): the weighted NaN-sum of
    each row's values, NaN for a row whose every value is NaN (unscorable)."""
    totals = (per_function * torch.tensor(weights).unsqueeze(0)).nansum(dim=1)
    totals[per_function.isnan().all(dim=1)] = math.nan
    return totals


MULTI_TASK = [
    {"prompt": "What is 2+2?", "task": "math", "solution": "4"},
    {"prompt": "Write a function that adds two numbers.", "task": "code", "solution": ""},
    {"prompt": "What is 3*4?", "task": "math", "solution": "12"},
    {"prompt": "Write a function that multiplies two numbers.", "task": "code", "solution": ""},
]
MULTI_TASK_COMPLETIONS = ["4", "def add(a, b): return a + b", "7", "return a * b"]


def math_task_reward(prompts, completions, task, solution, **kwargs):
    """TRL's multi-task example's shape: scores the math rows, None for the others."""
    rows = zip(completions, task, solution, strict=True)
    return [(1.0 if c.strip() == s else -1.0) if t == "math" else None for c, t, s in rows]


def code_task_reward(prompts, completions, task, **kwargs):
    """Scores the code rows, None for the others."""
    rows = zip(completions, task, strict=True)
    return [(1.0 if c.startswith("def ") else -1.0) if t == "code" else None for c, t in rows]


def test_trls_multi_task_example_runs_unchanged_with_trls_totals():
    functions, weights = (math_task_reward, code_task_reward), [1.0, 0.5]
    want = trl_rewards_per_function(functions, MULTI_TASK, MULTI_TASK_COMPLETIONS)
    rewards = {f"{__name__}:{f.__name__}": w for f, w in zip(functions, weights, strict=True)}
    scores = score_rewards(rewards, MULTI_TASK_COMPLETIONS, MULTI_TASK)  # no on_error: None needs no setting
    got = torch.stack(list(scores.parts.values()), dim=1)
    assert torch.equal(got.isnan(), want.isnan()) and want.isnan().any()  # None where TRL has NaN
    assert got.nan_to_num(7.0).tolist() == want.nan_to_num(7.0).tolist()
    assert scores.total.tolist() == trl_totals(want, weights).tolist() == [1.0, 0.5, -1.0, -0.5]
    assert not scores.failed.any()


def test_a_row_no_reward_applies_to_is_nan_and_warned_as_trl_logs_it(caplog):
    rows = [*MULTI_TASK[:2], {"prompt": "Tell me a joke.", "task": "chat", "solution": ""}]
    completions = [*MULTI_TASK_COMPLETIONS[:2], "no"]
    functions, weights = (math_task_reward, code_task_reward), [1.0, 1.0]
    with caplog.at_level(logging.WARNING):
        want = trl_totals(trl_rewards_per_function(functions, rows, completions), weights)
    assert "All reward functions returned None" in caplog.text  # TRL's warning for such a row
    rewards = {f"{__name__}:{f.__name__}": w for f, w in zip(functions, weights, strict=True)}
    with pytest.warns(InfgrpoWarning, match=r"no reward for 1 of 3 completions: .* \(first: completion 'no' of the "
                      r"row \{'prompt': 'Tell me a joke.'"):  # fmt: skip
        scores = score_rewards(rewards, completions, rows)
    assert scores.total.nan_to_num(7.0).tolist() == want.nan_to_num(7.0).tolist() == [1.0, 1.0, 7.0]


def nan_and_inf(completions, **kwargs):
    return [math.nan, math.inf] + [1.0] * (len(completions) - 2)


def raises(completions, **kwargs):
    raise KeyError("solution")


def test_nan_is_trls_none_and_inf_or_an_exception_stops_as_trl_would_not_silently_train():
    want = trl_rewards_per_function([nan_and_inf], MULTI_TASK, MULTI_TASK_COMPLETIONS)
    assert math.isnan(want[0, 0]) and math.isinf(want[1, 0])  # TRL: NaN is None; inf is summed into the group
    with pytest.raises(RewardError, match=r"reward '.*nan_and_inf' returned inf for sample 1 "):
        score_rewards({f"{__name__}:nan_and_inf": 1.0}, MULTI_TASK_COMPLETIONS, MULTI_TASK)
    with pytest.raises(KeyError):
        trl_rewards_per_function([raises], MULTI_TASK, MULTI_TASK_COMPLETIONS)  # TRL stops on an exception
    with pytest.raises(RewardError, match=r"reward '.*:raises' raised KeyError: 'solution' \(set rewards.on_error"):
        score_rewards({f"{__name__}:raises": 1.0}, MULTI_TASK_COMPLETIONS, MULTI_TASK)


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


def logs_short(completions, log_extra, **kwargs):
    log_extra("verdict", ["ok"] * (len(completions) - 1))
    return [1.0] * len(completions)


def test_a_log_extra_column_of_the_wrong_length_is_named():
    with pytest.raises(RewardError, match=r"log_extra\('verdict', ...\) logged 3 values for 4 completions \(rewards: "
                       r".*logs_short\); log_extra takes one value per completion"):  # fmt: skip
        score({f"{__name__}:logs_short": 1.0})


def test_trls_rewards_that_read_chat_messages_are_the_ones_found_to():
    from infgrpo.rewards import resolve_reward
    from infgrpo.rewards.signature import conversation_annotation

    chat_only = [
        "trl.rewards:accuracy_reward",
        "trl.rewards:reasoning_accuracy_reward",
        "trl.rewards:think_format_reward",
        "trl.rewards:get_cosine_scaled_reward(max_len=10)",
    ]
    for name in chat_only:
        fn = resolve_reward(name)
        assert conversation_annotation(fn) == "list[list[dict[str,str]]]", name
        with pytest.raises(TypeError):  # TRL's own function on string completions: the failure the check foresees
            fn(completions=TEXTS, solution=SOLUTIONS, completion_ids=IDS)
    assert conversation_annotation(resolve_reward(OVERLONG)) is None
    assert conversation_annotation(resolve_reward(REPEAT)) is None
    assert not [n for n in ("math", "format", "gsm8k", "synthetic") if conversation_annotation(resolve_reward(n))]
