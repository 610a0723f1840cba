"""Reward functions selected by name, weighted, called in TRL 1.16's convention with every column of the rows.

Built-ins: ``synthetic`` (the tiny task's verifier), ``gsm8k`` / ``numeric`` (numeric exact match),
``math`` (math-verify, as TRL's ``accuracy_reward``), ``reasoning_gym`` (a reasoning-gym task's own
verifier), ``format`` (think/answer tags), ``overlong`` (DAPO's soft length penalty). Any importable
callable works too (``"package.module:function"``, TRL's ``"trl.rewards:accuracy_reward"``), a factory's call,
a sequence-classification reward model, or a function registered with :func:`register_reward`; see
:mod:`infgrpo.rewards.core` and :mod:`infgrpo.rewards.calls` for the call.
"""

from infgrpo.rewards import math, open_r1, reasoning_tasks, shaping, synthetic  # noqa: F401 - registers the built-ins
from infgrpo.rewards.calls import RewardLog, TrainerState
from infgrpo.rewards.core import (
    REWARDS,
    RewardError,
    RewardScores,
    check_rewards,
    compute_rewards,
    correct_answers,
    correct_rows,
    register_reward,
    resolve_reward,
    score_rewards,
)

__all__ = [
    "REWARDS",
    "RewardError",
    "RewardLog",
    "RewardScores",
    "TrainerState",
    "check_rewards",
    "compute_rewards",
    "correct_answers",
    "correct_rows",
    "register_reward",
    "resolve_reward",
    "score_rewards",
]
