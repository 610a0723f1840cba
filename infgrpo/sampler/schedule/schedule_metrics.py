"""How good a rollout's schedule and length predictions were: pure functions over plain lists.

- ``lower_bound_steps``: no schedule of these lengths on ``num_slots`` slots takes fewer decode steps
  than ``max(max_i d_i, ceil(sum_i d_i / num_slots))``, d_i the steps sequence i occupies a slot.
- ``prediction_errors``: mean absolute error (tokens), Spearman rank correlation and the share of
  predictions within +-20% of the actual length (``prediction_stats``: with the per-sequence predictions).
"""

from __future__ import annotations

import math
from typing import Any

import torch


def lower_bound_steps(durations: list[int], num_slots: int) -> int:
    """``max(max_i d_i, ceil(sum_i d_i / num_slots))`` (0 for no work)."""
    if not durations:
        return 0
    return max(max(durations), math.ceil(sum(durations) / num_slots))


def average_ranks(values: torch.Tensor) -> torch.Tensor:
    """Ranks 1..n of ``values`` (n,), ties given their average rank (float64)."""
    order = torch.argsort(values, stable=True)
    sorted_vals = values[order]
    r = torch.empty(len(values), dtype=torch.float64)
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        r[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman rank correlation of two equally long lists; 0.0 when either is constant."""
    rx, ry = average_ranks(torch.tensor(x, dtype=torch.float64)), average_ranks(torch.tensor(y, dtype=torch.float64))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = float(rx.norm() * ry.norm())
    return float(rx @ ry) / denom if denom > 0 else 0.0


def prediction_errors(predicted: list[float], actual: list[int]) -> dict[str, float]:
    """``length_mae`` (tokens), ``length_spearman`` and ``length_within_20pct`` of the predictions."""
    p = torch.tensor(predicted, dtype=torch.float64)
    a = torch.tensor(actual, dtype=torch.float64)
    return {
        "length_mae": float((p - a).abs().mean()),
        "length_spearman": spearman(predicted, [float(v) for v in actual]),
        "length_within_20pct": float(((p - a).abs() <= 0.2 * a).double().mean()),
    }


def prediction_stats(predicted: list[float], lengths: list[int], group_size: int) -> dict[str, Any]:
    """A rollout's ``predicted_lengths`` (one per sequence; ``predicted`` has one per prompt) and their errors."""
    per_seq = [predicted[i // group_size] for i in range(len(lengths))]
    return {"predicted_lengths": per_seq, **prediction_errors(per_seq, lengths)}
