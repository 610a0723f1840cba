"""The verifier of the shipped synthetic task."""

from __future__ import annotations

from infgrpo.assets.task import solve
from infgrpo.rewards.core import REWARDS


@REWARDS.register("synthetic")
def synthetic_reward(completions: list[str], metadata: list[dict]) -> list[float]:
    """1.0 when the completion equals the synthetic task's answer exactly (whitespace-trimmed)."""
    out = []
    for text, meta in zip(completions, metadata, strict=True):
        answer = meta.get("answer") or solve(meta["prompt"])
        out.append(1.0 if text.strip() == answer else 0.0)
    return out
