"""A seeded, shuffling batch sampler that can resume in the middle of an epoch.

Epoch ``e`` visits the dataset in the order of ``torch.randperm(n, seed + e)``. The owner records
how many batches were *consumed* (not merely prefetched) and restores ``(epoch, consumed)`` from a
checkpoint; the next iteration then skips exactly those batches, so a resumed run sees the same
prompts in the same order as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


class ResumableBatchSampler(Sampler[list[int]]):
    """Batches of ``batch_size`` indices of a dataset of ``num_items`` rows, last partial batch dropped."""

    def __init__(self, num_items: int, batch_size: int, seed: int = 0, shuffle: bool = True) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        if num_items < batch_size:
            raise ValueError(f"the dataset has {num_items} rows, fewer than batch_size={batch_size}")
        self.num_items, self.batch_size, self.seed, self.shuffle = num_items, batch_size, seed, shuffle
        self.epoch = 0
        self.consumed = 0  # batches of `epoch` handed to training

    def __len__(self) -> int:
        return self.num_items // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        if self.consumed >= len(self):  # the previous epoch finished: start the next one
            self.epoch, self.consumed = self.epoch + 1, 0
        skip = self.consumed
        if self.shuffle:
            order = torch.randperm(self.num_items, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        else:
            order = torch.arange(self.num_items)
        for b in range(skip, len(self)):
            yield order[b * self.batch_size : (b + 1) * self.batch_size].tolist()

    def mark_consumed(self) -> None:
        """Called once per batch that training actually used."""
        self.consumed += 1

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "consumed": self.consumed, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.consumed = int(state["epoch"]), int(state["consumed"])
