"""PromptStream: the endless, seeded, resumable stream of prompts that dynamic sampling draws from.

    stream = PromptStream(num_items=1000, seed=3, num_replicas=2, rank=1)
    for index in stream: ...          # dataset indices; each rank its own share, in a seeded order
    stream.position                   # indices this rank has drawn (a checkpoint keeps every rank's)

Beside the batches Lightning hands to the steps (:class:`~infgrpo.data.resumable.ResumableBatchSampler`),
a step under dynamic sampling may need more prompts than its batch: it draws them here. Pass ``e`` of the
stream visits the dataset in the order ``torch.randperm(n, seed + e)`` (the seed differs from the
batches' by construction, :meth:`PromptDataModule.prompt_stream`); rank ``r`` of ``k`` takes the
positions ``r, r + k, r + 2k, ...`` of each pass, so ranks never draw the same prompt in a pass. The
state is each rank's count of indices drawn: the same count resumes the same stream exactly.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch


class PromptStream:
    """This rank's endless stream of dataset indices (see the module docstring)."""

    def __init__(self, num_items: int, seed: int, num_replicas: int = 1, rank: int = 0, position: int = 0) -> None:
        if num_items < num_replicas:
            raise ValueError(f"the dataset has {num_items} rows, fewer than the {num_replicas} ranks")
        self.num_items, self.seed, self.num_replicas, self.rank = num_items, seed, num_replicas, rank
        self.per_pass = len(range(rank, num_items, num_replicas))
        self.position = position
        self._order: tuple[int, list[int]] | None = None  # (pass, this rank's indices of it)

    def order(self, epoch: int) -> list[int]:
        """This rank's indices of pass ``epoch``, in order."""
        if self._order is None or self._order[0] != epoch:
            perm = torch.randperm(self.num_items, generator=torch.Generator().manual_seed(self.seed + epoch))
            self._order = (epoch, perm[self.rank :: self.num_replicas].tolist())
        return self._order[1]

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        epoch, k = divmod(self.position, self.per_pass)
        self.position += 1
        return self.order(epoch)[k]
