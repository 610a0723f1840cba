"""Refill policies: which waiting sequence takes a slot that just became free.

A policy owns the waiting queue of one rollout. The engine (and the trace simulator in
:mod:`infgrpo.sampler.schedule.simulate`, which must make the same decisions) talks to it in three calls::

    policy = REFILL_POLICIES.get("lpt")(seqs, num_slots)   # seqs carry .predicted_length
    seq = policy.pop(slot, now)        # a slot is free at decode step `now`: who runs in it? (or None)
    policy.finished(seq, slot, now)    # it ended (its slot is free again)

Policies, by name (``SamplerConfig.refill``):

- ``fifo``: prompt-major order, blind to lengths.
- ``sjf``: shortest predicted first (the paper's runtime policy). Minimizes mean waiting time, not
  the makespan: the longest sequences start last and finish alone, leaving the pool idle.
- ``lpt``: longest predicted first. Online this *is* Graham's LPT list schedule: with exact lengths
  its makespan is within 4/3 - 1/(3m) of the optimum (m slots); with wrong predictions it self-corrects,
  since a slot is refilled when it actually frees.
- ``planned``: follows the planner's global assignment (:func:`infgrpo.sampler.schedule.planner.plan`), each
  slot working through its own queue; a slot whose queue ran dry takes the longest job of the most
  loaded queue; when a prediction proves wrong (a sequence runs past its prediction or ends far
  before it) the waiting sequences are re-planned around the slots' remaining work.

Ties (e.g. every prediction equal, or no predictor) keep prompt-major order, so every policy is then
``fifo``. The choice changes the order of work only: each sequence's tokens come from its own random
stream (:mod:`infgrpo.sampler.engine.sampling`), so every policy yields the same completions.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Literal

from infgrpo.registry import Registry
from infgrpo.sampler.schedule.planner import Planner, plan
from infgrpo.sampler.schedule.sequence import Sequence

Refill = Literal["fifo", "sjf", "lpt", "planned"]
"""``SamplerConfig.refill``: the names of :data:`REFILL_POLICIES`."""
REFILL_POLICIES = Registry("refill")


def predicted(seq: Sequence) -> float:
    """The sequence's predicted length in tokens (0 when nothing is predicted)."""
    return seq.predicted_length if seq.predicted_length is not None else 0.0


class RefillPolicy:
    """The waiting queue of one rollout; subclasses decide the order.

    Args:
        seqs: every sequence of the rollout, prompt-major, all waiting.
        num_slots: slots of the pool.
    """

    def __init__(self, seqs: list[Sequence], num_slots: int, **_: object) -> None:
        self.num_slots = num_slots
        self.queue: deque[Sequence] = deque(self.order(seqs))

    def order(self, seqs: list[Sequence]) -> list[Sequence]:
        """The order the queue serves ``seqs`` in; the base class keeps them as given (prompt-major)."""
        return list(seqs)

    def __len__(self) -> int:
        """Sequences still waiting."""
        return len(self.queue)

    def pop(self, slot: int, now: int) -> Sequence | None:
        """The sequence that runs next in ``slot`` (free at decode step ``now``); None leaves the
        slot idle until the next one frees (only ``planned`` does that)."""
        return self.queue.popleft()

    def extend(self, seqs: list[Sequence], now: int) -> None:
        """Adds ``seqs`` (a prompt drawn during the rollout: dynamic sampling) to the waiting queue, in the
        policy's order among those waiting (ties: the earlier ones first)."""
        self.queue = deque(self.order([*self.queue, *seqs]))

    def finished(self, seq: Sequence, slot: int, now: int) -> None:
        """``seq``, popped for ``slot``, ended at decode step ``now``."""


@REFILL_POLICIES.register("fifo")
class Fifo(RefillPolicy):
    """First come, first served: prompt-major order."""


@REFILL_POLICIES.register("sjf")
class ShortestFirst(RefillPolicy):
    """Shortest predicted length first (stable: ties keep prompt-major order)."""

    def order(self, seqs: list[Sequence]) -> list[Sequence]:
        """``seqs`` by ascending predicted length, ties in prompt-major order."""
        return sorted(seqs, key=predicted)


@REFILL_POLICIES.register("lpt")
class LongestFirst(RefillPolicy):
    """Longest predicted length first (stable: ties keep prompt-major order)."""

    def order(self, seqs: list[Sequence]) -> list[Sequence]:
        """``seqs`` by descending predicted length, ties in prompt-major order."""
        return sorted(seqs, key=lambda s: -predicted(s))


@REFILL_POLICIES.register("planned")
class Planned(RefillPolicy):
    """Each slot follows its queue of a global plan; re-planned when predictions prove wrong.

    Args:
        planner: planning method, see :func:`infgrpo.sampler.schedule.planner.plan`.
        epsilon: the planner's approximation slack.
        tolerance: a prediction "proves wrong" when the actual length leaves
            [pred / (1 + tolerance), pred * (1 + tolerance)].

    A slot whose queue ran dry takes the longest job of the queue predicted to finish last; while the
    plan is trusted, only a job that would end before that queue does (so with exact predictions
    the plan's makespan is kept exactly), else the slot stays idle until the next one frees. Re-planning
    happens at most when the waiting queue has halved since the last plan, so a rollout of n
    sequences plans O(log n) times.
    """

    def __init__(
        self,
        seqs: list[Sequence],
        num_slots: int,
        planner: Planner = "auto",
        epsilon: float = 0.1,
        tolerance: float = 0.25,
        **_: object,
    ) -> None:
        self.num_slots, self.method, self.epsilon, self.tolerance = num_slots, planner, epsilon, tolerance
        self.waiting: dict[int, Sequence] = dict(enumerate(seqs))  # id -> seq, ids in prompt-major order
        self.pred = [predicted(s) for s in seqs]
        self.running: dict[int, tuple[int, int]] = {}  # slot -> (seq id, start step)
        self.busy_until = [0.0] * num_slots  # predicted end of each slot's running sequence
        self.deadlines: list[tuple[float, int, int]] = []  # heap of (overdue after, slot, seq id)
        self.replans = 0
        self.informed = len(set(self.pred)) > 1  # equal predictions carry no information: run fifo
        self.make_plan(loads=[0.0] * num_slots)

    def __len__(self) -> int:
        return len(self.waiting)

    def extend(self, seqs: list[Sequence], now: int) -> None:
        """Adds ``seqs`` to the waiting work and plans it again around the slots' remaining work."""
        for s in seqs:
            self.waiting[len(self.pred)] = s
            self.pred.append(predicted(s))
        self.informed = len(set(self.pred)) > 1
        self.make_plan(self.remaining(now))

    def make_plan(self, loads: list[float]) -> None:
        """Assigns the waiting sequences to slots already busy for ``loads`` more steps."""
        ids = sorted(self.waiting) if self.informed else []
        work = [self.pred[i] for i in ids]
        p = plan(work, self.num_slots, self.method, self.epsilon, loads)
        self.queues = [deque(ids[j] for j in q) for q in p.queues]  # longest first within a slot
        self.queued_work = [sum(work[j] for j in q) for q in p.queues]  # predicted work left per queue
        self.planned_at = len(ids)
        self.dirty = False

    def remaining(self, now: int) -> list[float]:
        """Predicted remaining work of each slot's running sequence (an overdue one: half its age)."""
        loads = [0.0] * self.num_slots
        for slot, (sid, start) in self.running.items():
            age = now - start
            left = self.pred[sid] - age
            loads[slot] = left if left > 0 else 0.5 * age
        return loads

    def pop(self, slot: int, now: int) -> Sequence | None:
        """The next sequence for ``slot`` (free at decode step ``now``), or None to leave the slot idle.

        Re-plans first when a prediction proved wrong and the queue has halved since the last plan; then
        takes the slot's own queue head, else the longest job another queue can spare (see the class docstring).
        Without informative predictions: prompt-major order.
        """
        # 1) a prediction proved wrong (a running sequence is overdue): the plan is stale
        while self.deadlines and self.deadlines[0][0] < now:
            _, s, sid = heapq.heappop(self.deadlines)
            if self.running.get(s, (-1,))[0] == sid:
                self.dirty = True
        # 2) re-plan around what is running, no more often than each halving of the queue
        if self.informed and self.dirty and len(self.waiting) <= self.planned_at // 2:
            self.make_plan(self.remaining(now))
            self.replans += 1
        # 3) this slot's next job, or one that another queue can spare without delaying the plan
        queue = self.queues[slot]
        if not self.informed:
            sid = next(iter(self.waiting))  # prompt-major order
        elif queue:
            sid = queue.popleft()
            self.queued_work[slot] -= self.pred[sid]
        else:
            finish = [max(self.busy_until[k], now) + self.queued_work[k] for k in range(self.num_slots)]
            q = max(range(self.num_slots), key=finish.__getitem__)
            # trusted plan: only what fits before that queue ends; stale plan: its longest job
            fits = [i for i in self.queues[q] if self.dirty or now + self.pred[i] <= finish[q]]
            if not fits:
                return None
            sid = fits[0]  # the longest that fits
            self.queues[q].remove(sid)
            self.queued_work[q] -= self.pred[sid]
        seq = self.waiting.pop(sid)
        self.running[slot] = (sid, now)
        self.busy_until[slot] = now + self.pred[sid]
        heapq.heappush(self.deadlines, (now + self.pred[sid] * (1 + self.tolerance), slot, sid))
        return seq

    def finished(self, seq: Sequence, slot: int, now: int) -> None:
        """Frees ``slot``; a sequence that ended well before its prediction marks the plan stale."""
        sid, start = self.running.pop(slot)
        self.busy_until[slot] = now
        if now - start < self.pred[sid] / (1 + self.tolerance):
            self.dirty = True  # ended well before its prediction: its slot frees early
