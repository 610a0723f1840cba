"""``--ckpt_path`` checked before the model loads: a checkpoint file of this run, whose weights fit the model.

    check_checkpoint_name(config.get("ckpt_path"))   # best, or a folder: ConfigError names --ckpt_path
    config["ckpt_path"] = resolve_last(checkpoint_folders(config["trainer"]))   # for --ckpt_path last
    state = check_checkpoint_path(config["ckpt_path"], settings)   # the checkpoint (memory-mapped), for check_resume

**Names.** Lightning's own names (``last``, ``best``, ``hpc``, ``registry``) and remote paths (``s3://...``) pass
through to Lightning, except two that name no checkpoint file of this run. ``best`` is the best checkpoint a
``ModelCheckpoint`` with a ``monitor`` kept *in the running trainer*: a new run (every resume is one) has none, and
Lightning said so only after the model loaded. A folder is what a sharded strategy reads: a distributed checkpoint
(``fsdp2`` with ``save_distributed_checkpoint: true``: shards and Lightning's ``meta.pt``) counts as one checkpoint,
its ``meta.pt`` read for the checks. Any other folder failed in ``torch.load`` after the model loaded; here it is
named with the checkpoints it holds (newest first), so the line says what to pass instead.

**last.** ``last`` is found here rather than by Lightning, which looks only in the new run's ``version_N`` folder
(empty: every run gets a new one) and then trains from step 0. :func:`find_last_checkpoint` takes the newest
``last.ckpt`` under the run's root, across versions, and in the checkpoint folders the config names:

    find_last_checkpoint([Path("runs/tiny")])   # runs/tiny/grpo/version_3/checkpoints/last.ckpt, or None

**A file.** A local file is opened through a memory map (no tensor is read) and must hold a checkpoint dictionary
with a ``state_dict``. The module a resumed run builds comes from the command's settings, and Lightning loads the
checkpoint's ``state_dict`` into it: a checkpoint of full fine-tuning (``lora.r: 0``) resumed with ``lora.r: 8``,
another rank, other LoRA target modules or 4-bit base weights fails there with torch's "Missing key(s) in
state_dict" (one line of thousands of characters) after the model loaded. :func:`checkpoint_mismatch` compares the
settings that shape the ``state_dict`` (:data:`SHAPING`) instead, and for a checkpoint of LoRA's weights alone
(:mod:`~infgrpo.training.checkpoint_state`) how the run holds its base (the dtype, 4-bit).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import torch
from jsonargparse import Namespace

from infgrpo.settings import ConfigError
from infgrpo.training.checkpoint_state import BASE_KEY, base_settings_mismatch
from infgrpo.training.compat_v01 import group_flat_hparams

LIGHTNING_NAMES = ("last", "best", "hpc", "registry")
LAST_NAMES = ("last.ckpt", "last-v*.ckpt")  # ModelCheckpoint's save_last, and its name when one exists already
LAST_DEPTH = 4  # root/grpo/version_N/checkpoints/last.ckpt: a deeper search could walk a whole home folder
DISTRIBUTED_META = "meta.pt"  # Lightning's metadata file in a distributed checkpoint's folder


def is_distributed_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a folder that Lightning's ModelParallelStrategy wrote as one distributed checkpoint."""
    return path.is_dir() and (path / DISTRIBUTED_META).is_file()


SHOWN = 4
"""Checkpoints named in the message of a folder (the newest ones)."""
SHAPING = (("lora", "r"), ("lora", "target_modules"), ("quantization", "load_in_4bit"))
"""The settings whose values decide the names and shapes of the module's weights."""


def check_checkpoint_path(ckpt_path: str | None, settings: Any = None) -> dict[str, Any] | None:
    """Raises a ConfigError naming ``--ckpt_path`` when it is no file, a file that is not a checkpoint (or one cut
    short), or, given the run's ``settings``, a checkpoint whose weights do not fit the model they build
    (:func:`checkpoint_mismatch`). Returns the checkpoint's dictionary (tensors
    memory-mapped, not read) for the resume checks, or None for a name Lightning resolves, a remote path or a folder
    (:func:`check_checkpoint_name` names a local folder first)."""
    if ckpt_path is None or ckpt_path in LIGHTNING_NAMES or ckpt_path.startswith(LIGHTNING_NAMES[-1] + ":"):
        return None
    if "://" in ckpt_path:
        return None
    path = Path(ckpt_path).expanduser()
    if not path.exists():
        raise ConfigError(f"--ckpt_path={ckpt_path!r} does not exist (looked at {path.resolve()})")
    if is_distributed_checkpoint(path):  # the shards stay unread; meta.pt holds everything else
        path = path / DISTRIBUTED_META
    elif path.is_dir():
        return None
    state = read_checkpoint(path, f"--ckpt_path={ckpt_path!r}")
    mismatch = checkpoint_mismatch(state.get("hyper_parameters"), settings) if settings is not None else None
    base = state.get(BASE_KEY)
    if mismatch is None and settings is not None and isinstance(base, Mapping):  # LoRA's: held as the run holds it
        mismatch = base_settings_mismatch(base, settings.policy, settings.quantization)
    if mismatch is not None:
        raise ConfigError(f"--ckpt_path={ckpt_path!r}: {mismatch}")
    return state


def read_checkpoint(path: Path, label: str) -> dict[str, Any]:
    """The checkpoint dictionary in the local file ``path``, memory-mapped (no tensor is read); a ConfigError that
    starts with ``label`` (``--ckpt_path='x.ckpt'``) when the file is no torch.save archive, one cut short, or no
    checkpoint (no ``state_dict``; a distributed checkpoint's ``meta.pt`` has none)."""
    what = "a checkpoint written by Lightning (Trainer.save_checkpoint or ModelCheckpoint, a .ckpt file)"
    if not zipfile.is_zipfile(path):
        raise ConfigError(f"{label} {not_an_archive(path, what)}")
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as err:  # noqa: BLE001 - whatever the unpickler says, the file is the problem
        raise ConfigError(f"{label} is not {what} ({type(err).__name__}: {err})") from err
    if not isinstance(state, dict) or ("state_dict" not in state and path.name != DISTRIBUTED_META):
        keys = ", ".join(map(str, list(state)[:5])) if isinstance(state, dict) else type(state).__name__
        raise ConfigError(f"{label} is not {what}: it holds {keys}, no state_dict")
    return state


def not_an_archive(path: Path, what: str) -> str:
    """Why the file ``path`` (no zip archive) is no checkpoint: cut short when it starts as one (a copy or a write
    that stopped early; its size said), else no torch.save archive at all."""
    size = path.stat().st_size
    with path.open("rb") as file:
        start = file.read(4)
    if start == b"PK\x03\x04":  # a zip archive's first entry, without the directory at its end
        return (
            f"is incomplete: it starts as a torch.save archive but its end is missing ({size:,} bytes), as when a copy "
            "or a write was cut short; copy it again, or resume from another checkpoint"
        )
    return f"is not {what}: it is no torch.save archive ({size:,} bytes)"


def find_last_checkpoint(folders: list[Path]) -> Path | None:
    """The newest (by modification time) ``last.ckpt`` in ``folders`` or up to :data:`LAST_DEPTH` levels below them,
    or None when there is none."""
    found = {path.resolve() for folder in folders for path in files_below(folder.expanduser(), LAST_NAMES)}
    return max(found, key=lambda path: path.stat().st_mtime, default=None)


def files_below(folder: Path, names: tuple[str, ...]) -> set[Path]:
    """The files matching one of ``names`` (glob patterns) in ``folder`` and up to :data:`LAST_DEPTH` levels below."""
    return {
        path
        for depth in range(LAST_DEPTH + 1)
        for name in names
        for path in folder.glob("/".join(["*"] * depth + [name]))
        if path.is_file() or is_distributed_checkpoint(path)
    }


def resolve_last(folders: list[Path]) -> str:
    """``--ckpt_path last`` as the newest ``last.ckpt`` in ``folders`` (checked), or a ConfigError saying where it
    looked."""
    path = find_last_checkpoint(folders)
    if path is None:
        looked = " and ".join(str(folder.expanduser().resolve()) for folder in folders)
        raise ConfigError(
            f"--ckpt_path='last' found no last.ckpt under {looked} (searched {LAST_DEPTH} folders deep): no run "
            "there wrote a checkpoint yet; drop --ckpt_path to start a new run, set trainer.default_root_dir to the "
            "run's folder, or give the checkpoint file"
        )
    return str(path)  # checked with the run's settings by the caller, as any --ckpt_path


def checkpoint_folders(trainer: Any) -> list[Path]:
    """Where the run's ModelCheckpoints write: the loggers' root (``trainer.default_root_dir``, else ``runs`` for the
    default loggers, else the working directory) and every ``dirpath`` the config gives a ModelCheckpoint."""
    root = trainer.get("default_root_dir") or ("runs" if trainer.get("logger") in (None, True) else os.getcwd())
    folders = [Path(root)]
    for callback in trainer.get("callbacks") or []:
        if isinstance(callback, dict | Namespace) and "ModelCheckpoint" in str(callback.get("class_path")):
            dirpath = (callback.get("init_args") or {}).get("dirpath")
            if dirpath and Path(dirpath) not in folders:
                folders.append(Path(dirpath))
    return folders


def checkpoint_mismatch(saved: Mapping[str, Any] | None, settings: Any) -> str | None:
    """What differs between the checkpoint's hyper-parameters ``saved`` and the run's ``settings`` (a
    ``ModuleSettings``) among :data:`SHAPING`, as one sentence; None when they agree or ``saved`` lacks them."""
    if not isinstance(saved, Mapping):
        return None
    saved = group_flat_hparams(saved)  # a checkpoint of infgrpo 0.1
    differ = []
    for group, name in SHAPING:
        before = (saved.get(group) or {}).get(name) if isinstance(saved.get(group), Mapping) else None
        now = getattr(getattr(settings, group), name)
        if before is not None and before != now:
            differ.append((f"{group}.{name}", before, now))
    if not differ:
        return None
    was = ", ".join(described(key, before) for key, before, _ in differ)
    now = ", ".join(described(f"model.{key}", value) for key, _, value in differ)
    flags = " ".join(f"--model.{key} {before}" for key, before, _ in differ if not isinstance(before, list))
    return (
        f"the checkpoint was trained with {was}, and this run has {now}: its weights do not fit this model; resume "
        f"with the checkpoint's settings{f' ({flags})' if flags else ''}, or drop --ckpt_path to start a new run"
    )


def described(key: str, value: Any) -> str:
    """``key=value``, with what ``lora.r=0`` means."""
    return f"{key}={value!r}" + (" (full fine-tuning)" if key.endswith("lora.r") and value == 0 else "")


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
