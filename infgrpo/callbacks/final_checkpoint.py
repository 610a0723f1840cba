"""Every run that trains ends with its final state in a checkpoint file, whatever checkpoint callbacks it lists.

    final = FinalCheckpoint()                # python -m infgrpo.fit adds it unless checkpointing is off
    L.Trainer(max_steps=60, callbacks=[ModelCheckpoint(every_n_train_steps=50, save_last=True), final]).fit(module)
    final.path                               # .../checkpoints/last.ckpt, holding step 60 (the ModelCheckpoint's: 50)

Lightning's ``ModelCheckpoint`` saves on its schedule (every N steps, at an evaluation, at an epoch's end), so a run
that ``trainer.max_steps`` stops between two of them kept only the earlier one: ``configs/agent-calculator.yaml`` (no
checkpoint callback: Lightning's default saves at each evaluation) kept step 15 of 20, and nothing at all of 2
steps. ``save_last: true`` saves at the end only when it never saved before (Lightning 2.6): 60 steps that save
every 50 kept step 50.

:class:`FinalCheckpoint` runs after every ``ModelCheckpoint`` at the end of training (it is a ``Checkpoint``, and
Lightning moves those last, in order). When ``last.ckpt`` of the run (:func:`last_checkpoint_path`: where a signal's
stop writes it and ``--ckpt_path last`` finds it) does not hold the final step yet, it writes it: every rank calls
the save, rank 0 writes, rank 0's reading of the file decides for all. Its :attr:`~FinalCheckpoint.path` is what the
run's last line names (:func:`final_line`). Being a ``Checkpoint``, it stands in for the ``ModelCheckpoint`` that
Lightning adds when a Trainer is given none: list one beside it for checkpoints along the way (the command line
adds it after the Trainer is built, so Lightning's default stays). A run that turned checkpointing off
(``trainer.enable_checkpointing: false``) gets none, and says so as it starts (:func:`no_checkpoint_note`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint

from infgrpo.training.preflight.checkpoints import DISTRIBUTED_META


def last_checkpoint_path(trainer: L.Trainer) -> Path:
    """``last.ckpt`` in the folder of the run's first ModelCheckpoint, else in ``checkpoints/`` of its log folder
    (where ``--ckpt_path last`` finds it).

    A ModelCheckpoint with ``save_last`` is told the file is its last checkpoint (``last_model_path``, set before the
    save, as it sets it itself): its own later saves of the last checkpoint then write that file again rather than
    a ``last-v1.ckpt`` beside it, so the run's last line and ``--ckpt_path last`` name one file."""
    callback = next((c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint)), None)
    if callback is not None and callback.save_last and callback.dirpath:
        step = {"epoch": torch.tensor(trainer.current_epoch), "step": torch.tensor(trainer.global_step)}
        callback.last_model_path = callback.format_checkpoint_name(step, callback.CHECKPOINT_NAME_LAST)
        return Path(callback.last_model_path)
    folder = getattr(callback, "dirpath", None)
    if not folder:
        folder = Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints"
    return Path(folder) / "last.ckpt"


def holds_step(path: Path, step: int, since: float) -> bool:
    """Whether the local checkpoint ``path`` (a file, or the folder of a distributed checkpoint) was written at or after
    ``since`` (a ``time.time()``) and holds ``global_step == step``; reads no tensor (memory-mapped)."""
    meta = path / DISTRIBUTED_META if path.is_dir() else path
    if not meta.is_file() or meta.stat().st_mtime < since:
        return False
    try:
        state = torch.load(meta, map_location="cpu", mmap=True, weights_only=True)
    except Exception:  # noqa: BLE001 - unreadable or not ours: written again
        return False
    return isinstance(state, dict) and state.get("global_step") == step


class FinalCheckpoint(Checkpoint):
    """Writes ``last.ckpt`` at the end of training unless it holds the final step already (see the module)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        """The checkpoint holding the final step, once training ended; None before, or when no step was trained."""
        self.step: int | None = None
        """The optimizer steps done when training ended."""
        self.written = False
        """Whether this callback wrote :attr:`path` (False: a ModelCheckpoint or a signal's stop had)."""
        self._start_step = 0
        self._since = 0.0
        # what a ModelCheckpoint has, for code that reads every checkpoint callback as one (infgrpo's divergence
        # message, Lightning's launchers)
        self.dirpath: str | None = None
        self.last_model_path = ""
        self.best_model_path = ""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Notes the step training starts from (a resumed run's) and the time (older files are not this run's)."""
        self._start_step, self._since = trainer.global_step, time.time()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """After every ModelCheckpoint's own end: ``last.ckpt`` holds the final step, written here if needed."""
        self.step = trainer.global_step
        if trainer.fast_dev_run or trainer.global_step == self._start_step:
            return  # Lightning writes nothing on a fast dev run; nothing was trained
        path = last_checkpoint_path(trainer)
        current = "://" not in str(path) and holds_step(path, trainer.global_step, self._since)
        if not trainer.strategy.broadcast(current):  # rank 0's file decides for every rank
            trainer.save_checkpoint(path, weights_only=False)  # every rank calls it; rank 0 writes
            self.written = True
        self.path, self.last_model_path, self.dirpath = path, str(path), str(path.parent)


def final_line(step: int, checkpoint: Path | None, output: Path | None, what: str, why_none: str) -> str:
    """The last line of a run that ended: its step, the checkpoint holding it (or ``why_none`` there is none) and the
    folder ``model.output_dir`` went to (``what``: adapter or model), when it was written."""
    where = f"checkpoint {checkpoint}" if checkpoint is not None else f"no checkpoint ({why_none})"
    model = f"; the trained {what} in {output}" if output is not None else ""
    return f"[infgrpo] done after step {step}: {where}{model}"


def no_checkpoint_note(trainer: Any, output_dir: Any) -> str | None:
    """The line a run with ``trainer.enable_checkpointing: false`` starts with (what it keeps), else None."""
    if trainer.get("enable_checkpointing") is not False:
        return None
    kept = f"model.output_dir ({output_dir}) alone" if output_dir else "nothing: model.output_dir is unset either"
    return (
        "[infgrpo] trainer.enable_checkpointing is false: this run writes no checkpoint and cannot be resumed; "
        f"it keeps {kept}"
    )
