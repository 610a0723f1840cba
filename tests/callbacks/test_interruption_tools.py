"""Ctrl-C while tools run (issue #59, item 4): the first stops at the step boundary as without tools; the second stops
at once, cancelling the queued tool calls and waiting for no running one. Real SIGINTs, sent by the tool itself at a
known point; no sleeps: the tool blocks on events the test holds."""

import signal
import threading

import lightning as L
import pytest

from infgrpo import GRPOModule
from infgrpo.callbacks.interruption import Interruption
from infgrpo.data import PromptDataModule

pytestmark = pytest.mark.slow  # whole fits


class Script:
    """What :func:`add` does on its first call, and what the test learns of it."""

    def __init__(self, signals: int) -> None:
        self.signals = signals  # SIGINTs the first call sends (each after the one before was handled)
        self.handled = [threading.Event() for _ in range(signals)]
        self.release = threading.Event()  # lets the first call return
        self.queued = threading.Event()  # set once a second tool turn was submitted
        self.calls: list[tuple[int, int]] = []


SCRIPT = Script(0)


def add(a: int, b: int) -> int:
    """Adds two integers; the first call signals the process as :data:`SCRIPT` says, then waits for its release.

    Args:
        a: The first number.
        b: The second number.
    """
    SCRIPT.calls.append((a, b))
    if len(SCRIPT.calls) == 1 and SCRIPT.signals:
        if SCRIPT.signals > 1:
            SCRIPT.queued.wait()  # another sample's turn waits in the queue behind this one
        for handled in SCRIPT.handled:
            # to the main thread, where a terminal's Ctrl-C lands (os.kill from this thread may land here, and a
            # Python handler runs only once the main thread wakes)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            handled.wait()  # signals sent together would arrive as one
        SCRIPT.release.wait()
    return a + b


class Told(Interruption):
    """The run's Interruption, which also tells :data:`SCRIPT` each time its handler ran."""

    def _received(self, signum, frame):
        done = sum(e.is_set() for e in SCRIPT.handled)
        if done == len(SCRIPT.handled) - 1:
            SCRIPT.handled[done].set()  # the last: set before the handler raises (a second Ctrl-C)
        try:
            super()._received(signum, frame)
        finally:
            if done < len(SCRIPT.handled) - 1:
                SCRIPT.handled[done].set()


def fit(tmp_path, signals, **agent):
    """A run of 3 steps on the tiny tool model whose ``add`` tool follows a new :data:`SCRIPT`; (trainer, module)."""
    global SCRIPT
    SCRIPT = Script(signals)
    module = GRPOModule(
        policy={"model_name_or_path": "tiny-tools"}, group_size=2, seed=4, threads=1,  # seed 4: 2 calls in step 1
        sampler={"num_slots": 4, "max_new_tokens": 160},
        rewards={"functions": {"infgrpo.assets.calculator:correct": 1.0}, "accuracy": None},
        agent={"tools": [add], "max_turns": 1, **agent},
    )  # fmt: skip
    data = PromptDataModule(
        path="tiny", tokenizer="tiny-tools", train_split="calculator-train", eval_split=None, batch_size=2,
        max_prompt_length=256, seed=0,
    )  # fmt: skip
    trainer = L.Trainer(
        max_steps=3, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[Told()], default_root_dir=tmp_path,
    )  # fmt: skip
    return trainer, module, data


def test_ctrl_c_while_a_tool_waits_stops_at_the_step_boundary(tmp_path):
    trainer, module, data = fit(tmp_path, signals=1)
    SCRIPT.release.set()  # the call returns once the handler ran
    try:
        trainer.fit(module, data)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    told = trainer.callbacks[0]
    assert told.signal == signal.SIGINT and trainer.global_step == told.step == 1
    assert told.checkpoint.is_file()


def test_a_second_ctrl_c_cancels_queued_tool_calls_and_waits_for_no_running_one(tmp_path):
    trainer, module, data = fit(tmp_path, signals=2, tool_workers=1)
    workers, turns = module.agent.workers, []
    submit = workers.submit

    def recorded(fn, *args):
        turns.append(submit(fn, *args))
        if len(turns) == 2:
            SCRIPT.queued.set()
        return turns[-1]

    workers.submit = recorded
    try:
        with pytest.raises(SystemExit):  # Lightning's answer to a KeyboardInterrupt: exit 1
            trainer.fit(module, data)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert len(SCRIPT.calls) == 1 and not turns[0].done()  # the running call still blocks: nobody waited for it
    assert len(turns) >= 2 and all(t.cancelled() for t in turns[1:])  # the queued ones never start
    SCRIPT.release.set()
    assert turns[0].result() and len(SCRIPT.calls) == 1
