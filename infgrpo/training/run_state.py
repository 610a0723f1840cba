"""What a rank keeps across a fit and its resume: its place among the ranks, torch's random state, its stream position.

    ranks, no_sync = trainer_ranks(trainer, module.all_gather, module.device)       # at fit start
    checkpoint["infgrpo_rng"] = gather_rng_state(ranks, device)                     # every rank calls it
    checkpoint["infgrpo_stream"] = gather_stream_positions(datamodule, ranks)       # every rank calls it
    restore_rng_state(checkpoint["infgrpo_rng"], ranks, device)    # after resuming: dropout continues exactly
    restore_stream_position(checkpoint["infgrpo_stream"], datamodule, ranks)         # before the first step

**Ranks.** The data-parallel ranks of a fit are read from the Lightning trainer once it starts. Each rank reseeds
torch's global generator (used only by dropout) with its rank, so ranks draw distinct dropout masks; the rollout
streams are keyed by global prompt index instead, and so need no state here (counter-based streams keyed by
(seed, global prompt, sample)).

**Random state.** Only dropout uses torch's global generator in training; every rank's state is saved and restored
exactly.

**Stream position** (dynamic sampling). Ranks draw different numbers of extra prompts from the data module's prompt
stream, so the checkpoint (written by rank 0) keeps every rank's count, gathered. A resumed run on another number
of ranks keeps its current random states and starts the streams afresh.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.nn.parallel import DistributedDataParallel

from infgrpo.runtime.ranks import Ranks
from infgrpo.runtime.seeds import derive_seed


def trainer_ranks(
    trainer: Any, all_gather: Callable[[torch.Tensor], torch.Tensor], device: torch.device
) -> tuple[Ranks, Callable[[], contextlib.AbstractContextManager]]:
    """(the ranks, DDP's gradient-accumulation context) of ``trainer``; refuses strategies other than DDP and
    Lightning's ModelParallelStrategy (``fsdp2``) with several processes: ranks run different numbers of
    micro-batches, which DDP's ``no_sync`` and the sharded update (:mod:`infgrpo.trainer.sharding`) tolerate."""
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


def reseed_rank(ranks: Ranks) -> None:
    """Reseeds torch's global generator with (its initial seed, this rank) when there are several ranks."""
    if ranks.world_size > 1:
        torch.manual_seed(derive_seed(torch.initial_seed(), ranks.rank))


def gather_rng_state(ranks: Ranks, device: torch.device) -> dict[str, torch.Tensor]:
    """Every rank's CPU (and, on CUDA, device) generator state, (world, n) uint8 each (all ranks call this)."""
    state = {"cpu": ranks.gather(torch.get_rng_state()[None].to(device)).cpu()}
    if torch.cuda.is_available() and device.type == "cuda":
        state["cuda"] = ranks.gather(torch.cuda.get_rng_state(device)[None].to(device)).cpu()
    return state


def restore_rng_state(state: dict[str, torch.Tensor] | None, ranks: Ranks, device: torch.device) -> None:
    """Restores this rank's row of ``state``; keeps the current states when it has another number of ranks.

    The row is copied first: a checkpoint that Lightning's sharded strategy loads memory-mapped holds views of
    the file, which ``set_rng_state`` cannot read (a segmentation fault, seen with torch 2.13)."""
    if state is None or state["cpu"].shape[0] != ranks.world_size:
        return
    torch.set_rng_state(state["cpu"][ranks.rank].to(torch.uint8).clone())
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"][ranks.rank].to(torch.uint8).clone(), device)


def gather_stream_positions(datamodule: Any, ranks: Ranks) -> list[int] | None:
    """Every rank's count of prompts drawn from the stream (None without a stream-drawing data module)."""
    if not hasattr(datamodule, "prompt_stream"):
        return None
    stream = datamodule.stream
    position = stream.position if stream is not None else datamodule.stream_start
    return [int(x) for x in ranks.gather(torch.tensor([position], dtype=torch.long)).flatten().tolist()]


def restore_stream_position(positions: list[int] | None, datamodule: Any, ranks: Ranks) -> None:
    """This rank's stream continues where the checkpoint left it (nothing on another number of ranks)."""
    if positions is None or not hasattr(datamodule, "prompt_stream") or len(positions) != ranks.world_size:
        return
    datamodule.stream, datamodule.stream_start = None, positions[ranks.rank]


@dataclass
class RunState:
    """What a checkpoint adds to Lightning's: the sampler's and the update's states, ``trainer.max_steps``, and each
    rank's random state and stream position.

    :meth:`write` runs on every rank (the gathers are collectives). A resumed run calls :meth:`read` when Lightning
    loads the checkpoint (the sampler and the update take their states at once) and :meth:`restore` for the rest once
    training starts, after fit start has seeded each rank.
    """

    rng: dict[str, torch.Tensor] | None = None
    """Every rank's torch random state (``infgrpo_rng``)."""
    stream: list[int] | None = None
    """Every rank's count of prompts drawn from the stream (``infgrpo_stream``)."""

    @staticmethod
    def write(
        checkpoint: dict[str, Any], sampler: Any, update: Any, ranks: Ranks, device: torch.device, trainer: Any
    ) -> None:
        """Adds ``infgrpo_sampler`` (rollout count, length predictor) and ``infgrpo_update`` (adaptive entropy
        coefficient) from their ``state_dict()``, ``infgrpo_max_steps`` (``trainer.max_steps``: a resume under another
        one is told its schedule changes; None without a trainer), ``infgrpo_rng`` and ``infgrpo_stream``."""
        checkpoint["infgrpo_sampler"] = sampler.state_dict()
        checkpoint["infgrpo_update"] = update.state_dict()
        checkpoint["infgrpo_max_steps"] = getattr(trainer, "max_steps", None)
        checkpoint["infgrpo_rng"] = gather_rng_state(ranks, device)
        checkpoint["infgrpo_stream"] = gather_stream_positions(getattr(trainer, "datamodule", None), ranks)

    @classmethod
    def read(cls, checkpoint: dict[str, Any], sampler: Any, update: Any) -> RunState:
        """Loads the sampler's and the update's states that ``checkpoint`` holds; the random states and streams it
        holds (None where it holds none), for :meth:`restore`."""
        if "infgrpo_sampler" in checkpoint:
            sampler.load_state_dict(checkpoint["infgrpo_sampler"])
        if "infgrpo_update" in checkpoint:
            update.load_state_dict(checkpoint["infgrpo_update"])
        return cls(checkpoint.get("infgrpo_rng"), checkpoint.get("infgrpo_stream"))

    def restore(self, ranks: Ranks, device: torch.device, datamodule: Any) -> None:
        """This rank continues the checkpoint's random state and stream (nothing on another number of ranks)."""
        restore_rng_state(self.rng, ranks, device)
        restore_stream_position(self.stream, datamodule, ranks)
