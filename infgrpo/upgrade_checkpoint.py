"""Upgrade a checkpoint of infgrpo 0.1 (flat hyper-parameters) to 0.2's groups, once, on disk.

    python -m infgrpo.upgrade_checkpoint runs/old/step2.ckpt runs/old/step2-v02.ckpt

infgrpo 0.1 saved ``GRPOModule``'s settings flat (``lora_r``, ``learning_rate``, ...); 0.2 keeps them in groups
(``lora.r``, ``optimizer.learning_rate``). ``GRPOModule.load_from_checkpoint`` builds the module from the saved
settings, so a 0.1 checkpoint must be upgraded first: this writes a copy whose hyper-parameters are moved into
their groups (:func:`~infgrpo.training.compat_v01.group_flat_hparams`); weights, optimizer state and everything
else are copied unchanged, and the file is written atomically. Resuming a run from a 0.1 checkpoint
(``--ckpt_path``) needs no upgrade: Lightning restores the state into the module the command line built.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from infgrpo.runtime.atomic_save import atomic_torch_save
from infgrpo.settings import ConfigError
from infgrpo.training.compat_v01 import group_flat_hparams, is_flat
from infgrpo.training.preflight.checkpoints import read_checkpoint

COMMAND = "python -m infgrpo.upgrade_checkpoint"


def is_v01_checkpoint(path: str | Path) -> bool:
    """Whether the local file ``path`` is a checkpoint with 0.1's flat hyper-parameters (reads no tensor)."""
    state = torch.load(Path(path), map_location="cpu", mmap=True, weights_only=True)
    hparams = state.get("hyper_parameters") if isinstance(state, dict) else None
    return isinstance(hparams, dict) and is_flat(hparams)


@contextlib.contextmanager
def upgrade_hint(checkpoint_path: Any) -> Iterator[None]:
    """Loading ``checkpoint_path`` in the block: when it fails on a local checkpoint of infgrpo 0.1 (an unknown flat
    key's TypeError; 0.1's rewards mapping, a ConfigError), one ConfigError naming this command instead; any other
    failure as it is (``GRPOModule.load_from_checkpoint``; the file is read only when loading failed)."""
    try:
        yield
    except (TypeError, ValueError) as err:
        local = isinstance(checkpoint_path, str | Path) and Path(checkpoint_path).is_file()
        if not (local and is_v01_checkpoint(checkpoint_path)):
            raise
        raise ConfigError(
            f"{checkpoint_path} is a checkpoint of infgrpo 0.1 (flat settings); upgrade it once with "
            f"{COMMAND} {checkpoint_path} <new.ckpt>, then load that"
        ) from err


def upgrade(source: str | Path, target: str | Path) -> dict[str, Any]:
    """Writes ``source`` (a 0.1 checkpoint) to ``target`` with its hyper-parameters in the groups; returns them.

    Raises a ValueError when ``source`` is no checkpoint, or one cut short (a ConfigError, as ``--ckpt_path`` says
    for the same file), or has no flat hyper-parameters (already 0.2, or not infgrpo's)."""
    if not Path(source).is_file():
        raise ConfigError(f"{source} is no file (looked at {Path(source).resolve()})")
    state = read_checkpoint(Path(source), str(source))
    hparams = state.get("hyper_parameters")
    if not isinstance(hparams, dict) or not is_flat(hparams):
        raise ValueError(f"{source}: no hyper-parameters of infgrpo 0.1 to upgrade (already grouped, or not infgrpo's)")
    state["hyper_parameters"] = group_flat_hparams(hparams)
    atomic_torch_save(state, target)
    return state["hyper_parameters"]


def main(argv: list[str] | None = None) -> None:
    """The command line: ``SOURCE TARGET``; prints what it wrote."""
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n")[0])
    ap.add_argument("source", help="the checkpoint of infgrpo 0.1")
    ap.add_argument("target", help="where to write the upgraded checkpoint (may be the same path)")
    args = ap.parse_args(argv)
    try:
        groups = upgrade(args.source, args.target)
    except (OSError, ValueError) as err:
        ap.error(str(err))
    moved = sorted(k for k, v in groups.items() if isinstance(v, dict))
    print(f"[infgrpo] wrote {args.target}: settings in the groups {', '.join(moved)}")


if __name__ == "__main__":
    main()
