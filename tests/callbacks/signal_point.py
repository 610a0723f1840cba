"""A known point for a test to signal a run at: the end of a step, after which the run waits for the signal.

    trainer.callbacks: [{class_path: tests.callbacks.signal_point.SignalPoint, init_args: {step: 1}}]

At the end of step ``step`` the callback prints ``[signal point] step 1 done``, then waits until SIGINT or SIGTERM
has been handled (by the handler that was installed: :class:`~infgrpo.callbacks.interruption.Interruption`'s), so
the test that reads the line and signals the process knows where the run is, on any machine load. Listed before
the run's Interruption (``python -m infgrpo.fit`` appends it), it runs first, so the run stops after this very step.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import lightning as L

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SignalPoint(L.Callback):
    """Waits at the end of step ``step`` for a signal (see the module docstring)."""

    def __init__(self, step: int = 1) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if trainer.global_step != self.step:
            return
        handled = threading.Event()
        previous = {s: signal.getsignal(s) for s in SIGNALS}

        def received(signum: int, frame: Any) -> None:
            previous[signum](signum, frame)  # the run's own handler (Interruption's)
            handled.set()

        for s in SIGNALS:
            signal.signal(s, received)
        print(f"[signal point] step {self.step} done: waiting for a signal", flush=True)
        while not handled.wait(0.5):  # wakes to run a handler whose signal landed as the wait began
            pass
        for s, handler in previous.items():
            signal.signal(s, handler)
