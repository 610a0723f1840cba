"""Atomic checkpoint writes: a crash mid-save never leaves a truncated checkpoint behind."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to a temporary file in the same folder, fsync, ``os.replace`` it in place, fsync the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_folder(path.parent)  # the rename itself survives a power loss
    finally:
        if tmp.exists():
            tmp.unlink()


def fsync_folder(folder: Path) -> None:
    """Flushes a folder's entries to disk where the platform allows it (not on Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def is_local(path: Any) -> bool:
    """Whether ``path`` is on the local filesystem (a plain path or ``file://``), not e.g. ``s3://``."""
    text = str(path)
    return "://" not in text or text.startswith("file://")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO whose saves are atomic on a local filesystem.

    Remote paths (``s3://``, ``gs://``, ...) go through Lightning's own fsspec writer, as before.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        """Writes ``checkpoint`` to ``path``: atomically when local, else with Lightning's fsspec writer."""
        if storage_options is not None or not is_local(path):
            super().save_checkpoint(checkpoint, path, storage_options)  # raises on storage_options, as Lightning
            return
        atomic_torch_save(checkpoint, str(path).removeprefix("file://"))
