"""The verifier of the shipped synthetic task."""

from __future__ import annotations

from typing import Any

from infgrpo.assets.task import solve
from infgrpo.rewards.calls import completion_texts
from infgrpo.rewards.core import REWARDS


@REWARDS.register("synthetic")
def synthetic_reward(
    completions: list[Any], prompts: list[Any], answer: list[str | None] | None = None, **kwargs: Any
) -> list[float]:
    """1.0 when the completion equals the synthetic task's answer exactly (whitespace-trimmed): the row's
    ``answer``, else the task solved from the prompt."""
    answers = answer if answer is not None else [None] * len(completions)
    out = []
    for text, prompt, reference in zip(completion_texts(completions), prompts, answers, strict=True):
        reference = reference or solve(prompt if isinstance(prompt, str) else prompt[-1]["content"])
        out.append(1.0 if text.strip() == reference else 0.0)
    return out
