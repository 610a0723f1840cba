"""What a reward function returned, checked against the contract: one float (or None) per completion.

    reward_values("my_module:score", fn(completions, metadata), n=8)   # [1.0, None, 0.5, ...]

The contract is TRL's: a list (or tuple, array, tensor) of ``n`` numbers, ``None`` for a row the function does
not apply to (left out of that row's sum: :mod:`infgrpo.rewards.core`). Anything else is a bug in the
function, not a failure of one sample: a :class:`RewardError` naming the function,
what it returned (abbreviated) and what it must return, whatever ``rewards.on_error`` says.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


class RewardError(ValueError):
    """A reward function raised, returned something other than its contract, or returned a non-finite value."""


CONTRACT = "must return a list of floats (or None per row), one per completion"


def abbreviated(value: Any, limit: int = 80) -> str:
    """``value``'s repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_number(value: Any) -> bool:
    """A real number: Python's or numpy's int / float / bool, or a tensor or array holding one number."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return value.size == 1 if isinstance(value, np.ndarray) else value.numel() == 1
    return isinstance(value, numbers.Real)


def reward_values(name: str, returned: Any, n: int) -> list[float | None]:
    """``returned`` (what the reward ``name`` gave for ``n`` completions) as ``n`` floats or None; a RewardError
    naming the function, the value and the contract when it is no sequence of ``n`` numbers and Nones."""
    if returned is None or isinstance(returned, str | bytes | Mapping) or is_number(returned):
        raise RewardError(f"reward {name!r} returned {type(returned).__name__} {abbreviated(returned)}; it {CONTRACT}")
    try:
        values = list(returned)
    except TypeError as err:
        raise RewardError(
            f"reward {name!r} returned {type(returned).__name__} {abbreviated(returned)}; it {CONTRACT}"
        ) from err
    if len(values) != n:
        raise RewardError(f"reward {name!r} returned {len(values)} values for {n} completions; it {CONTRACT}")
    for i, value in enumerate(values):
        if value is not None and not is_number(value):
            raise RewardError(
                f"reward {name!r} returned {type(value).__name__} {abbreviated(value)} for completion {i} "
                f"(of {abbreviated(values, 60)}); it {CONTRACT}"
            )
    return [None if v is None else float(v) for v in values]


def failure_cause(err: BaseException) -> str:
    """What a reward's exception means when its message does not say it ("; ..." to append), else ""."""
    if isinstance(err, TypeError) and "string indices must be integers" in str(err):
        return (
            "; it read a completion as chat messages (completion[0]['content']), but the completions are strings "
            "because the prompts are strings: set data.as_conversation: true (each string prompt becomes a "
            "[system, user] conversation), or give the data conversational prompts"
        )
    return ""
