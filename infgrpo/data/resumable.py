"""A seeded, shuffling batch sampler that can resume in the middle of an epoch.

Epoch ``e`` visits the dataset in the order of ``torch.randperm(n, seed + e)``. The owner records
how many batches were *consumed* (not merely prefetched); a checkpoint stores the epoch and the
prompts consumed, and the next iteration skips exactly those, so a resumed run sees the same
prompts in the same order as an uninterrupted one.

Across data-parallel ranks every rank draws the same permutation and takes its contiguous share
of each *global* batch of ``batch_size * num_replicas`` prompts: rank ``r`` gets positions
``r*batch_size .. (r+1)*batch_size - 1``. So ``num_replicas`` ranks of ``batch_size`` prompts see
exactly the prompts, in the same global order, of one process with ``num_replicas * batch_size``.
The state counts prompts consumed, so a checkpoint resumes on any number of ranks.

A new iteration continues the current epoch when the last one stopped early (training used fewer
batches than it had), and starts the next epoch otherwise. Lightning, resumed from a checkpoint
written at an epoch's end, first runs one more batch in the old epoch before starting its next one;
with this rule those are the next epoch's first batch and then its remaining ones, in order.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


class ResumableBatchSampler(Sampler[list[int]]):
    """This rank's batches of ``batch_size`` indices of a dataset of ``num_items`` rows.

    Global batches of ``batch_size * num_replicas`` rows; a last partial global batch is dropped.
    """

    def __init__(
        self,
        num_items: int,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank={rank} must be in [0, num_replicas={num_replicas})")
        if num_items < batch_size * num_replicas:
            raise ValueError(
                f"the dataset has {num_items} rows, fewer than one global batch: batch_size={batch_size} "
                f"x {num_replicas} ranks"
            )
        self.num_items, self.batch_size, self.seed, self.shuffle = num_items, batch_size, seed, shuffle
        self.num_replicas, self.rank = num_replicas, rank
        self.global_batch = batch_size * num_replicas
        self.epoch = -1  # the epoch being iterated (-1 before the first)
        self.start = 0  # position in the epoch's order where this iteration began
        self.consumed = 0  # global batches of `epoch` that training used since `start`
        self._resume: tuple[int, int] | None = None  # (epoch, prompts consumed)
        self.exhausted = True  # the last iteration yielded all its batches

    def __len__(self) -> int:
        return self.num_items // self.global_batch

    def __iter__(self) -> Iterator[list[int]]:
        if self._resume is not None:
            (self.epoch, skip), self._resume = self._resume, None
        elif self.epoch >= 0 and not self.exhausted:  # the last iteration stopped early: continue it
            skip = self.start + self.consumed * self.global_batch
        else:
            self.epoch, skip = self.epoch + 1, 0
        if skip + self.global_batch > self.num_items:  # every batch of the epoch was used: the next one
            self.epoch, skip = self.epoch + 1, 0
        self.start, self.consumed, self.exhausted = skip, 0, False
        if self.shuffle:
            gen = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.num_items, generator=gen)
        else:
            order = torch.arange(self.num_items)
        for begin in range(skip, self.num_items - self.global_batch + 1, self.global_batch):
            mine = begin + self.rank * self.batch_size  # this rank's contiguous share of the global batch
            yield order[mine : mine + self.batch_size].tolist()
        self.exhausted = True

    def mark_consumed(self) -> None:
        """Called once per batch that training actually used."""
        self.consumed += 1

    def state_dict(self) -> dict[str, int]:
        """Position in the data, independent of the number of ranks: prompts consumed in ``epoch``."""
        if self.epoch < 0:
            return {"epoch": 0, "consumed_prompts": 0, "seed": self.seed}
        prompts = self.start + self.consumed * self.global_batch
        return {"epoch": self.epoch, "consumed_prompts": prompts, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """The next iteration continues epoch ``state["epoch"]`` after its consumed prompts."""
        if "consumed_prompts" in state:
            prompts = int(state["consumed_prompts"])
        else:  # written before multi-rank support: batches of one process with this batch size
            prompts = int(state["consumed"]) * self.batch_size
        self._resume = (int(state["epoch"]), prompts)
