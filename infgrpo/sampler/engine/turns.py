"""Multi-turn samples in the slot pool: the ``Turns`` protocol the host side implements, ``ToolWait`` and ``Tools``.

    rollouts = sampler.sample(prompts, 8, seed=0, turns=make_turns)  # a Turns a run: what follows each turn
    rollouts.exchanges[n]                       # what turns.ended recorded for entry n (the host's record)
    rollouts.tools                              # ToolSummary: calls, failures, rounds, wait_s, steps_while_waiting

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

Where a sample really finishes (its last turn called no tool, ran out of ``max_new_tokens``, was rolled back or hit
``max_turns``), the engine calls ``turns.ended(seq, prompt)`` and keeps what it returns on the sequence
(``Sequence.record``): the sampler hands the records back as ``Rollouts.exchanges`` and the counts as a typed
:class:`~infgrpo.sampler.engine.summaries.ToolSummary` (``Rollouts.tools``), so nothing leaves the rollout by a side
door. A feed hears of the sample only after that, so a judge of ended groups reads complete records.

A waiting sample holds host token lists, no K/V: rollout memory stays the pool's whatever the tools' latency, the
number of turns or the group size.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch
from transformers import PreTrainedModel

from infgrpo.sampler.engine.summaries import ToolSummary
from infgrpo.sampler.model_support import text_config
from infgrpo.sampler.schedule.sequence import Sequence, SequenceStatus

if TYPE_CHECKING:
    from infgrpo.sampler.engine.feed import Feed
    from infgrpo.sampler.schedule.scheduler import Scheduler

WAKE_S = 0.5
"""Longest a blocked wait on tool futures goes without running the process's pending signal handlers."""


class Turns(Protocol):
    """What follows a sample's turn (the host side: parsing the turn, running its tools); see the module docstring.

    ``calls``, ``failures`` and ``timeouts`` count the tool calls the rollout ran, ``dropped`` the results rolled back
    (the engine reads them once, for :class:`~infgrpo.sampler.engine.summaries.ToolSummary`).
    """

    calls: int
    failures: int
    timeouts: int
    dropped: int

    def turn_ended(self, seq: Sequence, prompt: list[int]) -> Future[list[int]] | None:
        """``seq``'s turn ended on a stop token (``seq.token_ids[seq.turn_start:]``, after ``prompt``): a future of
        the suffix ids to append (tool results and the generation prompt), or None when the sample is done."""

    def rolled_back(self, seq: Sequence) -> None:
        """The engine dropped the suffix of ``seq``'s last future (TRL's rollback): the sample ends as it is."""

    def ended(self, seq: Sequence, prompt: list[int]) -> Any:
        """``seq`` is finished (after ``prompt``; nothing more is appended to it): the record the rollout returns for
        it (``Rollouts.exchanges``; kept on ``seq.record``)."""


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


def context(model: PreTrainedModel) -> int | None:
    """The model's context in positions (``max_position_embeddings`` of its text config), or None when unbounded."""
    return getattr(text_config(model.config), "max_position_embeddings", None)


def no_kv(seq: Sequence) -> None:
    """Keeps (or drops) no K/V of ``seq``: ``Tools``' default ``park`` and ``unpark`` (no model runner)."""


@dataclass
class Tools:
    """One rollout's multi-turn samples: offers ended turns to ``turns``, resumes the samples whose tools are done,
    and records each sample that finishes (``turns.ended``) before its feed hears of it.

    ``max_new_tokens`` and ``context`` bound a sample with its tool results (TRL's rollback rule). ``park`` keeps a
    leaving sample's K/V for its resume (within its bound), ``unpark`` drops them when it ends instead (the model
    runner's, :meth:`~infgrpo.sampler.engine.model_runner.ModelRunner.park`).
    """

    turns: Turns
    sched: Scheduler
    feed: Feed
    max_new_tokens: int
    context: int | None
    park: Callable[[Sequence], Any] = no_kv
    unpark: Callable[[Sequence], Any] = no_kv
    wait: ToolWait = field(default_factory=ToolWait)
    finished: int = 0
    """Samples that finished (recorded) so far."""

    def offer(self, seqs: list[Sequence]) -> list[Sequence]:
        """The sequences that ended; those whose turn ended on a stop token are offered to the turns, and those
        handed a future leave to wait on it. Returns the others, recorded: they finished."""
        done = []
        for seq in seqs:
            prompt = self.feed.prompts[seq.prompt_idx]
            future = self.turns.turn_ended(seq, prompt) if seq.finish_reason == "stop" else None
            if future is None:
                done.append(self.record(seq))
            else:
                self.park(seq)
                self.wait.add(seq, future)
                self.sched.leave(seq)
        return done

    def record(self, seq: Sequence) -> Sequence:
        """``seq`` finished: ``turns.ended`` records it (kept on ``seq.record``); returns it."""
        seq.record = self.turns.ended(seq, self.feed.prompts[seq.prompt_idx])
        self.finished += 1
        self.sched.finished(seq)
        return seq

    def resume(self, back: list[tuple[Sequence, list[int]]]) -> None:
        """Samples back from their tools, with the suffix ids to append. TRL's rollback rule: a suffix that takes
        the completion past ``max_new_tokens``, or prompt + completion to the context, is dropped
        (``turns.rolled_back``) and the sample ends as it is. Otherwise the suffix is appended (tool mask 0, log-prob
        0.0) and the sample queued ahead of new work; one left with no room for a model token ends there
        ('length')."""
        ended = []
        for seq, suffix in back:
            total = len(seq) + len(suffix)
            prompt_len = len(self.feed.prompts[seq.prompt_idx])
            if total > self.max_new_tokens or (self.context is not None and prompt_len + total >= self.context):
                self.unpark(seq)
                self.turns.rolled_back(seq)
                self.sched.back(seq)
                ended.append(self.record(seq))
                continue
            if seq.tool_mask is None:
                seq.tool_mask = [1] * len(seq)
            seq.token_ids.extend(suffix)
            seq.tool_mask.extend([0] * len(suffix))
            seq.logprobs = [*seq.logprobs.tolist(), *([0.0] * len(suffix))]
            seq.turns += 1
            seq.turn_start = len(seq)
            if total == self.max_new_tokens:  # no room for the next turn (TRL generates nothing after it)
                self.unpark(seq)
                seq.finish_reason = "length"
                seq.logprobs = torch.tensor(seq.logprobs, dtype=torch.float32)
                self.sched.back(seq)
                ended.append(self.record(seq))
                continue
            seq.status, seq.finish_reason = SequenceStatus.WAITING, None
            self.sched.resume(seq)
        self.feed.ended(ended)

    def summary(self) -> ToolSummary:
        """What this rollout's tools did (the turns' call counts, the waits')."""
        t, w = self.turns, self.wait
        return ToolSummary(
            samples=self.finished, calls=t.calls, failures=t.failures, timeouts=t.timeouts, rounds=w.rounds,
            wait_s=w.wait_s, dropped=t.dropped, steps_while_waiting=w.steps_while_waiting,
        )  # fmt: skip
