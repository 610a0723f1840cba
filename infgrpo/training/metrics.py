"""The metrics of one GRPO step, built in one place from what the step produced.

    metrics = step_metrics(batch, rollouts, update.metrics(), times, ranks, lr, memory, G, "synthetic")
    # {"reward": .., "accuracy": .., "time/rollout_s": .., "rollout/decode_steps": .., "loss": .., ...}

Every value is of the *global* batch (identical on every rank): rewards and lengths over every rank's
rows, times and decode steps of the slowest rank, slot utilization averaged over ranks; what dynamic sampling,
adaptive groups and tools found (``dynamic/*``, ``adaptive/*``, ``tools/*``: TRL's and ours) as the rollout's typed
summaries reduce it over ranks (:meth:`~infgrpo.sampler.DynamicSummary.reduce`,
:meth:`~infgrpo.sampler.AdaptiveSummary.reduce`, :meth:`~infgrpo.sampler.engine.summaries.ToolSummary.reduce`). The
rollout's schedule and length-prediction telemetry (:data:`SCHEDULE_METRICS`) is this rank's. The module logs
them as ``train/<key>``. :class:`StepRecord` keeps the step's batch, rollout and scores for what reads them
after the step (a callback, benchmarks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from infgrpo.algo import zero_std_fraction
from infgrpo.algo.advantages import nanstd
from infgrpo.rewards import correct_rows
from infgrpo.runtime.ranks import Ranks
from infgrpo.sampler import Rollouts
from infgrpo.scoring import BatchScores, Scores

SCHEDULE_METRICS = (
    "bubble_fraction",
    "steps_over_lower_bound",
    "replans",
    "length_mae",
    "length_spearman",
    "length_within_20pct",
    "predict_time_s",
    "num_slots",
    "oom_retries",
    "graph_captures",
)
"""Keys of ``Rollouts.stats`` logged as ``rollout/<key>`` (when the sampler reports them)."""


def progress_bar(metrics: dict[str, float]) -> dict[str, float]:
    """What the progress bar shows of a step's metrics: the reward and the CUDA memory peaks."""
    bar = {"reward": metrics["reward"]}
    bar.update({k.removeprefix("memory/"): v for k, v in metrics.items() if k.startswith("memory/")})
    return bar


def step_metrics(
    batch: BatchScores,
    rollouts: Rollouts,
    update: dict[str, float],
    times: tuple[float, float],
    ranks: Ranks,
    lr: float,
    memory: dict[str, float],
    group_size: int,
    accuracy: str | None,
) -> dict[str, float]:
    """The step's metrics (see the module docstring) of this rank's ``rollouts`` and every rank's ``batch`` scores;
    ``times`` = this rank's (rollout, update) seconds.

    ``update``: the update's metrics (:meth:`~infgrpo.update.runner.UpdateResult.metrics`); ``memory``: the
    phases' CUDA peaks (``memory/*``, empty elsewhere); ``lr``: the rate of the step's first optimizer step;
    ``accuracy``: the reward whose value >= 1 counts as right (``rewards.accuracy``; None: no accuracy).
    """
    st = rollouts.stats
    local = [times[0], times[1], float(st["decode_steps"]), st["slot_utilization"]]
    per_rank = ranks.gather(torch.tensor([local], dtype=torch.float64))  # (world, 4)
    metrics: dict[str, Any] = {
        "reward": batch.total.nanmean(),  # unscorable rows (NaN) left out, as TRL does
        "reward_std": nanstd(batch.total),
        "rewards_failed": batch.failed.sum(),  # completions with a failed reward (rewards.on_error)
        "completion_length": batch.lengths.mean(),
        "completion_length_max": batch.lengths.max(),
        "completions_truncated": batch.truncated.mean(),  # share that hit max_new_tokens
        "frac_reward_zero_std": zero_std_fraction(batch.total, group_size),
        "time/rollout_s": per_rank[:, 0].max(),
        "time/update_s": per_rank[:, 1].max(),
        "rollout/decode_steps": per_rank[:, 2].max(),
        "rollout/slot_utilization": per_rank[:, 3].mean(),
        "rollout/tokens_per_s": st["tokens_per_s"],  # generated tokens / rollout wall time (this rank)
        "lr": lr,
        **update,  # loss, kl, clip ratios, micro-batches, update/oom_retries, update/token_budget
        **memory,  # CUDA: memory/rollout_peak_gb, memory/update_peak_gb, memory/reserved_gb
    }
    correct = correct_rows(batch.parts, accuracy)
    if correct is not None:
        metrics["accuracy"] = correct.mean()  # NaN when all failed
    for key in SCHEDULE_METRICS:  # this rank's schedule and length-prediction telemetry
        if key in st:
            metrics[f"rollout/{key}"] = float(st[key])
    for summary in (rollouts.dynamic, rollouts.adaptive, rollouts.tools):  # each reduced over ranks as it says
        if summary is not None:
            metrics.update(summary.reduce(ranks))
    if len(batch.parts) > 1:
        for name, values in batch.parts.items():
            metrics[f"rewards/{name}"] = values.nanmean()
    return {k: float(v) for k, v in metrics.items()}


@dataclass
class StepRecord:
    """What one training step drew and scored, kept for what reads it after the step: the batch, its rollout (the
    ``rollout_index``-th of the run, from 0) and their scores. The
    :class:`~infgrpo.callbacks.completion_table.CompletionTable` callback prints and logs a few of its completions;
    benchmarks read the rollout's statistics from it."""

    batch: list[dict]
    rollouts: Rollouts
    scores: Scores
    rollout_index: int
