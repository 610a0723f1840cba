"""Checkpoints of infgrpo 0.1, whose hyper-parameters were flat, read with the groups.

    GRPOModule.load_from_checkpoint(grouped_checkpoint("old.ckpt"))   # what GRPOModule.load_from_checkpoint does

Resuming a run (``fit --ckpt_path``) never reads the hyper-parameters (the module is built from the
configuration); loading a module from a checkpoint builds it from them, so the flat ones are moved into
their groups first (:func:`~infgrpo.training.hparams.group_flat_hparams`).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import IO, Any

import torch

from infgrpo.training.hparams import group_flat_hparams, is_flat


def grouped_checkpoint(checkpoint: str | Path | IO[bytes]) -> Any:
    """``checkpoint`` itself when its hyper-parameters are grouped (or absent); else an in-memory copy with the
    flat hyper-parameters moved into their groups (the weights are read once through a memory map)."""
    if not isinstance(checkpoint, str | Path):
        return checkpoint  # a stream or URL: Lightning's own loading
    path = Path(checkpoint)
    if not path.is_file():
        return checkpoint
    state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    hparams = state.get("hyper_parameters")
    if not isinstance(hparams, dict) or not is_flat(hparams):
        return checkpoint
    state["hyper_parameters"] = group_flat_hparams(hparams)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer
