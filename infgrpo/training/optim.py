"""The optimizer of a GRPO run: AdamW with a linear learning-rate warmup, stepped once per optimizer step.

opt, sched = adamw_with_warmup(params, lr=1e-4, weight_decay=0.0, warmup_steps=10)
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def adamw_with_warmup(
    params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float, warmup_steps: int
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over ``params``; optimizer step k (from 0) uses (k + 1) / (warmup_steps + 1) of ``lr`` until the full
    rate at step ``warmup_steps`` (no warmup for ``warmup_steps <= 0``)."""
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    warm = max(warmup_steps, 0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / (warm + 1)) if warm else 1.0)
    return opt, sched
