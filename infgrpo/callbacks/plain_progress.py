"""One plain line of progress every ``log_every_n_steps`` steps, for output that is not a terminal.

The rich progress bar draws nothing into a file or a pipe, so a ``nohup`` / SLURM / CI run of
``python -m infgrpo.fit`` would show nothing until it ends. With stdout redirected, the fit CLI adds
this callback, which prints (rank 0 only)::

    [infgrpo] step 10/100 reward 0.412 accuracy 0.375 rollout 1.21 s update 0.43 s 812 tok/s
    [infgrpo] step 10/100 reward 0.412 ... 812 tok/s memory 9.8 GB      # on CUDA: peak allocated
    [infgrpo] held-out after step 20: accuracy 0.525 reward 0.530     # after each validation (not the sanity check)

It can be added to any ``Trainer``: ``Trainer(callbacks=[PlainProgress()])`` (with ``always=True``
it prints on a terminal too).
"""

from __future__ import annotations

import sys
from typing import TextIO

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

FIELDS = (
    ("reward", "train/reward", "{:.3f}"),
    ("accuracy", "train/accuracy", "{:.3f}"),
    ("rollout", "train/time/rollout_s", "{:.2f} s"),
    ("update", "train/time/update_s", "{:.2f} s"),
)
"""(label, logged metric, format) of each field of the line, when the metric was logged."""


class PlainProgress(Callback):
    """Prints one line every ``trainer.log_every_n_steps`` training batches when ``stream`` is not a terminal.

    Args:
        stream: where to write (default: ``sys.stdout`` at print time).
        always: print even when ``stream`` is a terminal.
    """

    def __init__(self, stream: TextIO | None = None, always: bool = False) -> None:
        self.stream = stream
        self.always = always
        self.batches = 0

    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stdout

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        """Counts the batch; every ``log_every_n_steps`` batches writes the line (global rank 0)."""
        self.batches += 1
        every = max(1, trainer.log_every_n_steps)
        out = self._out()
        if self.batches % every or not trainer.is_global_zero or (not self.always and is_terminal(out)):
            return
        print(progress_line(trainer, pl_module.device), file=out, flush=True)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Writes the held-out accuracy and reward of the validation that just ended (global rank 0)."""
        out = self._out()
        if trainer.sanity_checking or not trainer.is_global_zero or (not self.always and is_terminal(out)):
            return
        line = heldout_line(trainer)
        if line:
            print(line, file=out, flush=True)


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def heldout_line(trainer: L.Trainer) -> str | None:
    """``[infgrpo] held-out after step N:`` and the validation's accuracy and reward (None when neither was logged)."""
    metrics = trainer.callback_metrics
    parts = [
        f"{name} {float(metrics[f'val/{name}']):.3f}" for name in ("accuracy", "reward") if f"val/{name}" in metrics
    ]
    return f"[infgrpo] held-out after step {trainer.global_step}: {' '.join(parts)}" if parts else None


def progress_line(trainer: L.Trainer, device: torch.device) -> str:
    """``[infgrpo] step N/M`` and the step's reward, accuracy, rollout and update seconds, tokens/s (memory on CUDA)."""
    metrics = trainer.callback_metrics
    total = f"/{trainer.max_steps}" if trainer.max_steps and trainer.max_steps > 0 else ""
    parts = [f"[infgrpo] step {trainer.global_step}{total}"]
    for label, key, fmt in FIELDS:
        if key in metrics:
            parts.append(f"{label} {fmt.format(float(metrics[key]))}")
    if "train/rollout/tokens_per_s" in metrics:
        parts.append(f"{float(metrics['train/rollout/tokens_per_s']):.0f} tok/s")
    if device.type == "cuda":
        parts.append(f"memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GB")
    return " ".join(parts)
