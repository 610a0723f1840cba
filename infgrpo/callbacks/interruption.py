"""Ctrl-C and SIGTERM become a checkpoint at the next step boundary, never a loss.

    trainer = L.Trainer(callbacks=[Interruption()])      # python -m infgrpo.fit adds it
    trainer.fit(module, data)
    if trainer.callbacks[0].signal: sys.exit(128 + trainer.callbacks[0].signal)

On SIGINT (Ctrl-C) or SIGTERM (what SLURM, Kubernetes and ``timeout`` send) the step under way finishes, then a
checkpoint is written (atomically, as every checkpoint of ``python -m infgrpo.fit``) as ``last.ckpt`` in the run's
checkpoint folder, ``model.output_dir`` is written at once (before the held-out evaluation that Lightning runs on
a stop, which a scheduler's grace period may cut short), the run ends, and ``python -m infgrpo.fit``
prints where the checkpoint went with the command that resumes (``--ckpt_path last``) and exits with 128 + the
signal's number (130, 143), so a scheduler sees the run did not finish. A second Ctrl-C stops at once: the tool calls
still queued are cancelled, and the running ones are not waited for (they run on daemon threads:
:func:`~infgrpo.agent.calls.stop_tool_calls`). Saved at a
step boundary, the checkpoint resumes to the parameters an uninterrupted run reaches (tested for both signals).
SLURM's requeue signal (``SIGUSR1`` with Lightning's ``SLURMEnvironment(auto_requeue=True)``) stays Lightning's.

Under data parallelism every rank learns at each step's end whether any rank was signalled (one small
collective), so all ranks stop after the same step and write one checkpoint together.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L

from infgrpo.agent.calls import stop_tool_calls
from infgrpo.callbacks.final_checkpoint import last_checkpoint_path

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interruption(L.Callback):
    """Turns SIGINT / SIGTERM into a checkpoint at the next step boundary and a clean end (see the module)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        """The signal that stopped the run (``signal.SIGINT``, ``signal.SIGTERM``), None while none came."""
        self.checkpoint: Path | None = None
        """Where the interrupted run's checkpoint went."""
        self.step: int | None = None
        """The optimizer steps done when it stopped."""
        self._previous: dict[int, Any] = {}

    def _received(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is not None and signum == signal.SIGINT:  # a second Ctrl-C: stop now
            signal.signal(signal.SIGINT, signal.default_int_handler)
            stop_tool_calls()  # queued tool calls never start; running ones are not waited for
            raise KeyboardInterrupt
        self.signal = self.signal or signum
        name = signal.Signals(signum).name
        print(f"[infgrpo] {name}: finishing this step, then a checkpoint (Ctrl-C again stops at once)", flush=True)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Installs the handlers (the main thread only: signals cannot be handled elsewhere)."""
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._received) for s in SIGNALS}

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """At a step boundary: when any rank was signalled, writes ``last.ckpt`` and stops the run."""
        if not trainer.strategy.reduce_boolean_decision(self.signal is not None, all=False):
            return
        self.signal = self.signal or signal.SIGTERM  # a rank told by another one
        self.checkpoint = last_checkpoint_path(trainer)  # where --ckpt_path last and the run's last line look
        self.step = trainer.global_step
        trainer.save_checkpoint(self.checkpoint, weights_only=False)  # every rank calls it; rank 0 writes
        write = getattr(pl_module, "write_output", None)  # GRPOModule: output_dir now, before the evaluation
        if callable(write):
            write()
        trainer.should_stop = True

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Puts the previous handlers back."""
        self.teardown_handlers()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        """Puts the previous handlers back when the run fails."""
        self.teardown_handlers()

    def teardown_handlers(self) -> None:
        """Restores the handlers that were there before :meth:`on_train_start`."""
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}
