"""``trainer.strategy: fsdp2``: Lightning's ModelParallelStrategy as infgrpo shards a policy (FSDP2, data parallel).

    python -m infgrpo.fit --config configs/qwen3-8b-fsdp2.yaml --trainer.strategy fsdp2 --trainer.devices 8
    L.Trainer(strategy=FSDP2Strategy(), devices=8, use_distributed_sampler=False)  # Python

Lightning's :class:`~lightning.pytorch.strategies.ModelParallelStrategy` defaults on one node to tensor
parallelism over every device and to checkpoints sharded in folders. :class:`FSDP2Strategy` fixes what infgrpo
builds on: one data-parallel mesh over all ranks (``devices x num_nodes``), no tensor parallelism, and full-state
checkpoints (one file, written by rank 0, that resumes on any number of ranks or in one process). Set
``save_distributed_checkpoint: true`` for models too large to gather on one rank: each rank then writes its
shard into a checkpoint folder (Lightning's distributed checkpoint), which resumes on the same number of ranks.
:meth:`~infgrpo.GRPOModule.configure_model` shards the policy
(:class:`~infgrpo.trainer.policy_sharding.PolicySharding`). The name ``fsdp2`` is registered where this room is
imported: :mod:`infgrpo.trainer`'s ``__init__``.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.constants import default_pg_timeout

NAME = "fsdp2"


def remove(path: Path) -> None:
    """Deletes the file or folder ``path`` if it exists."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


class FSDP2Strategy(ModelParallelStrategy):
    """FSDP2 over every rank: each decoder layer and the root sharded 1/N, with no tensor parallelism.

    Args:
        save_distributed_checkpoint: each rank writes its shard into a checkpoint folder (for models too large
            to gather on one rank; it resumes on the same number of ranks); default False: rank 0 writes the
            full state into one file, which resumes on any number of ranks and in one process.
        process_group_backend: ``nccl`` on GPUs, ``gloo`` on CPUs by default.
        timeout: how long a collective waits for the other ranks.
    """

    def __init__(
        self,
        save_distributed_checkpoint: bool = False,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
    ) -> None:
        super().__init__(
            data_parallel_size="auto",
            tensor_parallel_size=1,
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
            timeout=timeout,
        )

    def setup_environment(self) -> None:
        """One data-parallel mesh over every process of every node (Lightning's default would be one per node)."""
        self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        """Lightning's save; a distributed checkpoint is written into ``<name>.partial`` and renamed into place once
        every rank's shard is in it, so a run killed while writing keeps the previous checkpoint whole (a full-state
        file goes through the trainer's checkpoint IO, which infgrpo's CLI makes atomic)."""
        if not self._save_distributed_checkpoint:
            super().save_checkpoint(checkpoint, filepath, storage_options)
            return
        path = Path(self.broadcast(str(filepath)))
        partial, old = path.with_name(path.name + ".partial"), path.with_name(path.name + ".old")
        if self.global_rank == 0:
            for stale in (partial, old):
                remove(stale)
        self.barrier()
        super().save_checkpoint(checkpoint, partial, storage_options)
        self.barrier()
        if self.global_rank == 0:
            if path.exists():
                path.rename(old)
            partial.rename(path)
            remove(old)
        self.barrier()

    @classmethod
    def register_strategies(cls, registry: Any) -> None:
        """Registers ``fsdp2`` (``trainer.strategy: fsdp2``) once."""
        if NAME not in registry:
            registry.register(NAME, cls, description="infgrpo: FSDP2 over all ranks, full-state checkpoints")
