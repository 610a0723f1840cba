"""Format and length shaping rewards."""

from __future__ import annotations

import re
from typing import Any

from infgrpo.rewards.calls import completion_texts
from infgrpo.rewards.core import REWARDS

_THINK_ANSWER = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)


@REWARDS.register("format")
def format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """1.0 for ``<think>...</think><answer>...</answer>`` and nothing else around them."""
    return [1.0 if _THINK_ANSWER.match(text) else 0.0 for text in completion_texts(completions)]


@REWARDS.register("overlong")
def overlong_penalty(
    completion_lengths: list[int] | None = None,
    max_completion_length: int | None = None,
    buffer: int | None = None,
    **kwargs: Any,
) -> list[float]:
    """DAPO's soft overlong punishment: 0 up to ``max - buffer`` tokens, then linear down to -1 at max.

    ``buffer`` defaults to a quarter of ``max_completion_length``.
    """
    if completion_lengths is None or not max_completion_length:
        raise ValueError("the overlong reward needs completion_lengths and max_completion_length")
    buf = buffer if buffer is not None else max(1, max_completion_length // 4)
    start = max_completion_length - buf
    return [0.0 - min(1.0, max(0, n - start) / buf) for n in completion_lengths]  # 0.0 - 0.0 is 0.0, not -0.0
