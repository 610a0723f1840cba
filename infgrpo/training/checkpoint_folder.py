"""``--ckpt_path`` values that name no checkpoint file of this run: ``best``, and a folder.

    check_checkpoint_name(config.get("ckpt_path"))   # before ``last`` is resolved; ConfigError names --ckpt_path

``best`` is the best checkpoint a ``ModelCheckpoint`` with a ``monitor`` kept *in the running trainer*: a new run
(every resume is one) has none, and Lightning said so only after the model loaded. A folder is what a sharded
strategy (FSDP, DeepSpeed) reads, and those are refused (:mod:`infgrpo.training.trainer_check`); DDP reads one
file, so a folder failed in ``torch.load`` after the model loaded. Here it is named with the checkpoints it holds
(newest first), so the line says what to pass instead.
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

from infgrpo.settings import ConfigError
from infgrpo.training.checkpoint_check import LAST_DEPTH, LAST_NAMES, files_below, is_distributed_checkpoint

SHOWN = 4
"""Checkpoints named in the message of a folder (the newest ones)."""


def checkpoints_in(folder: Path) -> list[Path]:
    """The ``.ckpt`` files in ``folder`` and up to :data:`LAST_DEPTH` levels below it, newest first."""
    return sorted(files_below(folder, ("*.ckpt",)), key=lambda path: path.stat().st_mtime, reverse=True)


def folder_message(ckpt_path: str, folder: Path) -> str:
    """Why ``--ckpt_path`` (the folder ``folder``) is refused: the checkpoints it holds, or none."""
    found = checkpoints_in(folder)
    lasts = [path for path in found if any(fnmatch(path.name, name) for name in LAST_NAMES)]
    head = f"--ckpt_path={ckpt_path!r} is a folder; infgrpo resumes from one checkpoint file"
    if len(lasts) == 1:
        n = len(found) - 1
        others = f" (it also holds {n} other checkpoint{'s' if n > 1 else ''})" if n else ""
        return f"{head}: its last checkpoint is {lasts[0]}{others}; give --ckpt_path {lasts[0]}"
    if not found:
        return (
            f"{head}, and it holds none (no .ckpt file {LAST_DEPTH} folders deep): give the checkpoint file, or "
            "--ckpt_path last for the newest last.ckpt under trainer.default_root_dir"
        )
    if len(found) == 1:
        return f"{head}: it holds one, {found[0]}; give --ckpt_path {found[0]}"
    named = ", ".join(str(path) for path in found[:SHOWN])
    more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return f"{head}; it holds {len(found)} checkpoints, newest first: {named}{more}; give one of them"


def check_checkpoint_name(ckpt_path: str | None) -> None:
    """A ConfigError for ``--ckpt_path best`` and for a local folder (see the module)."""
    if ckpt_path is None:
        return
    if ckpt_path == "best":
        raise ConfigError(
            "--ckpt_path='best' is the best checkpoint of a ModelCheckpoint with a monitor in the running trainer, "
            "and a resumed run starts a new one, which has none yet: give --ckpt_path last (the newest last.ckpt "
            "under trainer.default_root_dir) or a checkpoint file"
        )
    folder = Path(ckpt_path).expanduser()
    if "://" not in ckpt_path and folder.is_dir() and not is_distributed_checkpoint(folder):
        raise ConfigError(folder_message(ckpt_path, folder))
