"""The data-parallel ranks of a fit, read from the Lightning trainer once it starts.

    ranks, no_sync = trainer_ranks(trainer, module.all_gather, module.device)

Each rank reseeds torch's global generator (used only by dropout) with its rank, so ranks draw distinct dropout
masks; the rollout streams are keyed by global prompt index instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.nn.parallel import DistributedDataParallel

from infgrpo.runtime.ranks import Ranks
from infgrpo.training.rng_state import reseed_rank


def trainer_ranks(
    trainer: Any, all_gather: Callable[[torch.Tensor], torch.Tensor], device: torch.device
) -> tuple[Ranks, Callable[[], contextlib.AbstractContextManager]]:
    """(the ranks, DDP's gradient-accumulation context) of ``trainer``; refuses strategies other than DDP and
    Lightning's ModelParallelStrategy (``fsdp2``) with several processes: ranks run different numbers of
    micro-batches, which DDP's ``no_sync`` and the sharded update (:mod:`infgrpo.runtime.sharding`) tolerate."""
    world = trainer.world_size
    sharded = isinstance(trainer.strategy, ModelParallelStrategy)
    if world > 1 and not (sharded or isinstance(trainer.strategy.model, DistributedDataParallel)):
        raise ValueError(
            f"trainer.strategy={type(trainer.strategy).__name__} is not supported with {world} processes; use "
            "strategy 'ddp' or 'fsdp2' (ranks run different numbers of micro-batches, which only DDP's gradient "
            "accumulation (no_sync) and infgrpo's sharded update tolerate)"
        )
    gather = (lambda x: all_gather(x.to(device))) if world > 1 else None
    ranks = Ranks(world, trainer.global_rank, gather)
    reseed_rank(ranks)
    no_sync = contextlib.nullcontext if sharded else getattr(trainer.strategy, "block_backward_sync", None)
    return ranks, no_sync or contextlib.nullcontext
