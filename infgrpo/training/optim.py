"""The optimizer of a GRPO run: AdamW and a learning-rate schedule, stepped once per optimizer step.

opt, sched = adamw_with_schedule(params, lr=1e-4, weight_decay=0.0, warmup_steps=10)                 # constant
opt, sched = adamw_with_schedule(params, 1e-4, 0.0, 0, schedule="cosine", total_steps=60)             # to 0

The schedules are transformers' (``lr_scheduler_type`` of TRL's ``GRPOConfig``) after the warmup: ``linear``
decays the rate to 0 at ``total_steps``, ``cosine`` along half a cosine to 0; with ``warmup_steps: 0`` the
factors equal ``get_linear_schedule_with_warmup`` / ``get_cosine_schedule_with_warmup`` at every step. The
warmup is this project's own (optimizer step k from 0 uses (k + 1) / (warmup_steps + 1) of the rate, so no
step has rate 0; transformers' uses k / warmup_steps).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from infgrpo.registry import choices
from infgrpo.settings import ConfigError, check_types

LRSchedule = Literal["constant", "linear", "cosine"]
LR_SCHEDULES = choices(LRSchedule)
"""``lr_scheduler_type`` values: constant after the warmup, or decayed to 0 at the run's last optimizer step."""


@dataclass
class OptimizerConfig:
    """AdamW and its learning-rate schedule (TRL's ``TrainingArguments`` names), stepped per optimizer step."""

    learning_rate: float = 1e-4
    """AdamW learning rate (> 0)."""
    weight_decay: float = 0.0
    """AdamW weight decay (>= 0)."""
    warmup_steps: int = 0
    """Linear learning-rate warmup in optimizer steps: optimizer step k (from 0) uses (k + 1) / (warmup_steps
    + 1) of the rate until the full rate at step ``warmup_steps``."""
    lr_scheduler_type: LRSchedule = "constant"
    """The rate after the warmup: ``constant``, or decayed to 0 at the run's last optimizer step
    (``trainer.max_steps``; else the epochs' batches x ``update.num_iterations``) along a line (``linear``,
    TRL's default) or half a cosine (``cosine``)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (0 disables)."""

    def __post_init__(self) -> None:
        check_types(self)
        for name, ok, rule in (
            ("learning_rate", self.learning_rate > 0, "> 0"),
            ("weight_decay", self.weight_decay >= 0, ">= 0"),
            ("warmup_steps", self.warmup_steps >= 0, ">= 0"),
            ("max_grad_norm", self.max_grad_norm >= 0, ">= 0 (0: off)"),
        ):
            value = getattr(self, name)
            if not (ok and math.isfinite(value)):
                raise ConfigError(f"{name}={value!r} must be a finite number {rule}")


def check_lr_schedule(schedule: str, field: str = "lr_scheduler_type") -> None:
    """A ValueError naming ``field`` unless ``schedule`` is one of :data:`LR_SCHEDULES`."""
    if schedule not in LR_SCHEDULES:
        raise ConfigError(f"{field}={schedule!r} must be one of {', '.join(LR_SCHEDULES)}")


def lr_factor(schedule: str, warmup_steps: int, total_steps: int | None) -> Callable[[int], float]:
    """The factor of the base rate at optimizer step k (from 0): ``factor(k)`` in (0, 1].

    ``total_steps``: optimizer steps of the run (needed by ``linear`` and ``cosine``); after it the
    factor stays 0 for ``linear``/``cosine``.
    """
    check_lr_schedule(schedule)
    warm = max(warmup_steps, 0)
    if schedule != "constant" and (total_steps is None or total_steps <= warm):
        raise ValueError(
            f"lr_scheduler_type={schedule!r} decays the rate over the run's optimizer steps, which must exceed "
            f"warmup_steps={warm}; got {total_steps} (set trainer.max_steps, or trainer.max_epochs with a "
            "finite data set)"
        )

    def factor(k: int) -> float:
        if k < warm:
            return (k + 1) / (warm + 1)
        if schedule == "constant":
            return 1.0
        progress = (k - warm) / (total_steps - warm)  # type: ignore[operator]
        if schedule == "linear":
            return max(0.0, 1.0 - progress)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))

    return factor


def run_optimizer_steps(trainer: Any, num_iterations: int) -> int | None:
    """The run's optimizer steps: ``trainer.max_steps`` (Lightning counts optimizer steps), else the epochs'
    batches x ``num_iterations``; None when neither is finite."""
    trainer.estimated_stepping_batches  # noqa: B018 (sets up the training data: num_training_batches)
    per_epoch, epochs = trainer.num_training_batches, trainer.fit_loop.max_epochs
    by_epochs = math.inf if epochs in (None, -1) else per_epoch * epochs * num_iterations
    total = min(trainer.max_steps if trainer.max_steps > 0 else math.inf, by_epochs)
    return None if math.isinf(total) else int(total)


def adamw_with_schedule(
    params: Iterable[torch.nn.Parameter],
    lr: float,
    weight_decay: float,
    warmup_steps: int,
    schedule: str = "constant",
    total_steps: int | None = None,
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over ``params`` and a ``LambdaLR`` of :func:`lr_factor` (step it after each optimizer step)."""
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(schedule, warmup_steps, total_steps))


def adamw_for_run(policy: torch.nn.Module, o: OptimizerConfig, trainer: Any, num_iterations: int) -> dict[str, Any]:
    """Lightning's ``configure_optimizers`` answer for a run: AdamW over ``policy``'s trainable parameters and the
    schedule of ``o``, whose length is the run's optimizer steps (:func:`run_optimizer_steps`; none for
    ``constant``)."""
    params = [p for p in policy.parameters() if p.requires_grad]
    total = run_optimizer_steps(trainer, num_iterations)  # always: it sets up the training data's batches
    total = total if o.lr_scheduler_type != "constant" else None
    opt, sched = adamw_with_schedule(
        params, o.learning_rate, o.weight_decay, o.warmup_steps, o.lr_scheduler_type, total
    )
    return {"optimizer": opt, "lr_scheduler": sched}
