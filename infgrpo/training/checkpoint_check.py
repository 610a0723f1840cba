"""``--ckpt_path`` checked before the model loads: a file that exists and is a Lightning checkpoint.

    check_checkpoint_path("runs/tiny/grpo/version_0/checkpoints/last.ckpt")

Lightning's own names (``last``, ``best``, ``hpc``, ``registry``) and remote paths (``s3://...``) pass through to
Lightning. A local file is opened through a memory map (no tensor is read) and must hold a checkpoint
dictionary with a ``state_dict``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import torch

from infgrpo.settings import ConfigError

LIGHTNING_NAMES = ("last", "best", "hpc", "registry")


def check_checkpoint_path(ckpt_path: str | None) -> None:
    """Raises a ConfigError naming ``--ckpt_path`` when it is no file, or a file that is not a checkpoint."""
    if ckpt_path is None or ckpt_path in LIGHTNING_NAMES or ckpt_path.startswith(LIGHTNING_NAMES[-1] + ":"):
        return
    if "://" in ckpt_path:
        return
    path = Path(ckpt_path).expanduser()
    if not path.exists():
        raise ConfigError(f"--ckpt_path={ckpt_path!r} does not exist (looked at {path.resolve()})")
    if path.is_dir():
        return  # a sharded (distributed) checkpoint folder: Lightning's strategy reads it
    what = "a checkpoint written by Lightning (Trainer.save_checkpoint or ModelCheckpoint, a .ckpt file)"
    if not zipfile.is_zipfile(path):
        raise ConfigError(f"--ckpt_path={ckpt_path!r} is not {what}: it is no torch.save archive")
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as err:  # noqa: BLE001 - whatever the unpickler says, the file is the problem
        raise ConfigError(f"--ckpt_path={ckpt_path!r} is not {what} ({type(err).__name__}: {err})") from err
    if not isinstance(state, dict) or "state_dict" not in state:
        keys = ", ".join(map(str, list(state)[:5])) if isinstance(state, dict) else type(state).__name__
        raise ConfigError(f"--ckpt_path={ckpt_path!r} is not {what}: it holds {keys}, no state_dict")
