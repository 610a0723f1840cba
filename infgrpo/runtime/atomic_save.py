"""Atomic file writes: a crash mid-save never leaves a truncated file behind (checkpoints, upgraded checkpoints).

    atomic_torch_save(state, "runs/x/last.ckpt")  # the old file stays whole until the new one is on disk

Used by the trainer's checkpoint IO (:mod:`infgrpo.trainer.checkpoint_io`) and :mod:`infgrpo.upgrade_checkpoint`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


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
