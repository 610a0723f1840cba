"""Reward functions selected by name, weighted, computed per completion with its prompt's metadata.

Built-ins: ``synthetic`` (the tiny task's verifier), ``gsm8k`` / ``numeric`` (numeric exact match),
``math`` (math-verify, as TRL's ``accuracy_reward``), ``reasoning_gym`` (a reasoning-gym task's own
verifier), ``format`` (think/answer tags), ``overlong`` (DAPO's soft length penalty). Any importable
callable works too: ``"package.module:function"``; see :mod:`infgrpo.rewards.core` for the signature.
"""

from infgrpo.rewards import math, reasoning_tasks, shaping, synthetic  # noqa: F401 - registers the built-ins
from infgrpo.rewards.core import (
    REWARDS,
    RewardError,
    RewardScores,
    check_rewards,
    compute_rewards,
    correct_answers,
    correct_rows,
    resolve_reward,
    score_rewards,
)

__all__ = [
    "REWARDS",
    "RewardError",
    "RewardScores",
    "check_rewards",
    "compute_rewards",
    "correct_answers",
    "correct_rows",
    "resolve_reward",
    "score_rewards",
]
