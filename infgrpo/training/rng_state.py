"""Torch's random state per data-parallel rank: distinct dropout masks per rank, saved and restored exactly.

    reseed_rank(ranks)                        # at fit start: rank r's generator from (initial seed, r)
    checkpoint["infgrpo_rng"] = gather_rng_state(ranks, device)
    restore_rng_state(checkpoint["infgrpo_rng"], ranks, device)   # after resuming: dropout continues exactly

Only dropout uses torch's global generator in training; the rollouts draw from counter-based streams
keyed by (seed, global prompt, sample), so they need no state here.
"""

from __future__ import annotations

import torch

from infgrpo.runtime.ranks import Ranks
from infgrpo.runtime.seeds import derive_seed


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
