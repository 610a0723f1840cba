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
        self.epoch = -1  # the epoch being iterated (-1 before the first)
        self.consumed = 0  # batches of `epoch` that training used
        self._resume: tuple[int, int] | None = None

    def __len__(self) -> int:
        return self.num_items // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        if self._resume is not None:
            (self.epoch, skip), self._resume = self._resume, None
        else:
            self.epoch, skip = self.epoch + 1, 0
        if skip >= len(self):  # the checkpoint was taken at the end of an epoch
            self.epoch, skip = self.epoch + 1, 0
        self.consumed = skip
        if self.shuffle:
            gen = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.num_items, generator=gen)
        else:
            order = torch.arange(self.num_items)
        for b in range(skip, len(self)):
            yield order[b * self.batch_size : (b + 1) * self.batch_size].tolist()

    def mark_consumed(self) -> None:
        """Called once per batch that training actually used."""
        self.consumed += 1

    def state_dict(self) -> dict[str, int]:
        if self.epoch < 0:
            return {"epoch": 0, "consumed": 0, "seed": self.seed}
        return {"epoch": self.epoch, "consumed": self.consumed, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """The next iteration continues epoch ``state["epoch"]`` after its consumed batches."""
        self._resume = (int(state["epoch"]), int(state["consumed"]))
