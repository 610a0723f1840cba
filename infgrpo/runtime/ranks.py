"""Ranks: the data-parallel processes one global batch is split over, and the gather GRPO needs.

Under Lightning's DDP each of ``world_size`` ranks holds a contiguous shard of every global batch:
with ``B`` prompts per rank, rank ``r`` holds global prompts ``r*B .. r*B + B - 1``. A group (the G
completions of one prompt) never spans ranks, so group advantages stay local. What is batch-wide
is computed from :meth:`Ranks.gather`, which concatenates every rank's rows in rank order, that is
in the global order a single process with ``world_size * B`` prompts would see:

- the reward std of ``scale_rewards: batch``;
- the loss normalizers (sequences for ``grpo``/``dr_grpo``, active tokens for ``dapo``/``bnpo``);
- the logged metrics.

No Lightning here: :class:`~infgrpo.GRPOModule` builds a ``Ranks`` from its trainer, with
Lightning's ``all_gather`` (gloo on CPU, NCCL on GPUs). A single process uses ``Ranks()``, whose
methods return their input unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Ranks:
    """``world_size`` data-parallel ranks; this process is ``rank``.

    ``all_gather`` maps a tensor (n, ...) of this rank to (world_size, n, ...) stacked over ranks
    (every rank calls it, with the same shape); None on a single process.
    """

    world_size: int = 1
    rank: int = 0
    all_gather: Callable[[torch.Tensor], torch.Tensor] | None = None

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank={self.rank} must be in [0, world_size={self.world_size})")
        if self.world_size > 1 and self.all_gather is None:
            raise ValueError(f"world_size={self.world_size} needs an all_gather function")

    def prompt_offset(self, local_prompts: int) -> int:
        """Global index of this rank's first prompt, when every rank holds ``local_prompts``."""
        return self.rank * local_prompts

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's ``x`` (n, ...) concatenated in rank order -> (world_size * n, ...), on ``x``'s device."""
        if self.world_size == 1:
            return x
        return self.all_gather(x).reshape(-1, *x.shape[1:]).to(x.device)

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise sum of ``x`` over ranks, added in rank order (so identical on every rank)."""
        if self.world_size == 1:
            return x
        return self.all_gather(x).to(x.device).sum(dim=0)

    def max(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise maximum of ``x`` over ranks."""
        if self.world_size == 1:
            return x
        return self.all_gather(x).to(x.device).amax(dim=0)
