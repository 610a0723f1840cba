"""Multi-turn samples in the slot pool: the ``Turns`` protocol the host side implements, and ``ToolWait``.

    stats = engine.run(feed, num_slots=8, turns=my_turns)   # a Turns: decides, at each turn's end, what follows

When a sample's turn ends on a stop token, the engine asks ``turns.turn_ended(seq, prompt)``. None: the sample is
done. A ``concurrent.futures.Future``: the sample **leaves the pool** (its slot is already free and is refilled from
the queue, so the other samples keep decoding) and waits in :class:`ToolWait` until the future resolves to the ids to
append (the tool results and the generation prompt: TRL's ``_get_tool_suffix_ids``). The engine takes the futures
that are done after each step, without blocking, and applies TRL's rollback rule to each (the completion plus the
suffix past ``max_new_tokens``, or prompt + completion + suffix reaching the model's context: ``turns.rolled_back``,
and the sample ends as it is). Otherwise the suffix is appended (tool mask 0, log-prob 0.0) and the sample is
resumed: queued ahead of new work, re-prefilled (prompt + tokens so far) into the next free slot, its next token
drawn from that prefill's last logits with the uniform of its stream at ``t`` = its model tokens so far. Only when
nothing runs and nothing can be admitted does the loop block, on the first future to finish.

A waiting sample holds host token lists, no K/V: rollout memory stays the pool's whatever the tools' latency, the
number of turns or the group size.
"""

from __future__ import annotations

import concurrent.futures
import time
from concurrent.futures import Future
from typing import Protocol

from infgrpo.sampler.schedule.sequence import Sequence

WAKE_S = 0.5
"""Longest a blocked wait on tool futures goes without running the process's pending signal handlers."""


class Turns(Protocol):
    """What follows a sample's turn (the host side: parsing the turn, running its tools); see the module docstring."""

    def turn_ended(self, seq: Sequence, prompt: list[int]) -> Future[list[int]] | None:
        """``seq``'s turn ended on a stop token (``seq.token_ids[seq.turn_start:]``, after ``prompt``): a future of
        the suffix ids to append (tool results and the generation prompt), or None when the sample is done."""

    def rolled_back(self, seq: Sequence) -> None:
        """The engine dropped the suffix of ``seq``'s last future (TRL's rollback): the sample ends as it is."""


class ToolWait:
    """The samples waiting on their tools' futures, and the counters of the waits.

    ``ready()`` takes the samples whose futures are done (never blocks); ``wait_first()`` blocks until one is
    (the engine calls it only when nothing runs and nothing can be admitted).
    """

    def __init__(self) -> None:
        self.waiting: dict[Future[list[int]], tuple[Sequence, float]] = {}  # future -> (sample, when it left)
        self.wait_s = 0.0
        """Seconds samples spent waiting on their tools, summed over samples."""
        self.steps_while_waiting = 0
        """Decode steps run while at least one sample waited."""
        self.rounds = 0
        """Futures handed out: tool rounds of one sample each."""

    def __len__(self) -> int:
        """Samples waiting."""
        return len(self.waiting)

    def add(self, seq: Sequence, future: Future[list[int]]) -> None:
        """``seq`` waits on ``future`` from now."""
        self.waiting[future] = (seq, time.perf_counter())
        self.rounds += 1

    def stepped(self) -> None:
        """A decode step ran: counted when some sample waited through it."""
        if self.waiting:
            self.steps_while_waiting += 1

    def ready(self) -> list[tuple[Sequence, list[int]]]:
        """The samples whose futures are done, with their suffixes, in (prompt, sample) order; they wait no more.
        A future that raised raises here."""
        done = [f for f in self.waiting if f.done()]
        return self._take(done)

    def wait_first(self) -> list[tuple[Sequence, list[int]]]:
        """Blocks until some future is done; then :meth:`ready`.

        The wait wakes every :data:`WAKE_S` seconds: a signal that lands while the thread releases the GIL to block
        (a worker thread holding it sends one, or a terminal's Ctrl-C hits that instant) interrupts nothing, and its
        Python handler (Ctrl-C's) runs only once this thread runs Python again."""
        futures = list(self.waiting)
        while not concurrent.futures.wait(futures, WAKE_S, concurrent.futures.FIRST_COMPLETED).done:
            pass
        return self.ready()

    def _take(self, done: list[Future[list[int]]]) -> list[tuple[Sequence, list[int]]]:
        now = time.perf_counter()
        out = []
        for future in done:
            seq, since = self.waiting.pop(future)
            self.wait_s += now - since
            out.append((seq, list(future.result())))
        return sorted(out, key=lambda item: (item[0].prompt_idx, item[0].sample_idx))
