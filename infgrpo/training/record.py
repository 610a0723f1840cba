"""StepRecord: what one training step drew and scored, kept for what reads it after the step.

The :class:`~infgrpo.callbacks.completion_table.CompletionTable` callback prints and logs a few of its
completions; benchmarks read the rollout's statistics from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from infgrpo.sampler import Rollouts
from infgrpo.training.scoring import Scores


@dataclass
class StepRecord:
    """The batch of one step, its rollout (the ``rollout_index``-th of the run, from 0) and their scores."""

    batch: list[dict]
    rollouts: Rollouts
    scores: Scores
    rollout_index: int
