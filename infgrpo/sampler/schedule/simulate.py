"""Trace simulator: the engine's schedule for known lengths, without a model.

``simulate`` makes exactly the engine's decisions for sequences whose lengths are given: it drives
the engine's :class:`~infgrpo.sampler.schedule.scheduler.Scheduler` (the same refill policy, free-slot stack,
admission rounds and timeline) with known lengths in place of a model. So a policy can be measured
on 65,536 sequences x 1,024 slots in seconds: it jumps from one finishing event to the next instead
of stepping, O(n log S) plus the policy's own cost.

    result = simulate(lengths, predicted, num_slots=8, policy="lpt")
    result.decode_steps / lower_bound_steps(result.durations, 8)

``first_token_free=True`` is the engine's accounting: a sequence's first token comes from its
prompt's prefill, so a completion of L tokens occupies a slot for L - 1 decode steps. With ``False``
every token costs a step (the paper's accounting, and HF ``generate``'s).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from infgrpo.sampler.schedule.refill import REFILL_POLICIES
from infgrpo.sampler.schedule.scheduler import Scheduler
from infgrpo.sampler.schedule.sequence import Sequence


@dataclass
class SimResult:
    """What :func:`simulate` returns: the schedule's decode steps, each sequence's duration and slot occupancy."""

    decode_steps: int
    durations: list[int]
    """Decode steps each sequence occupied a slot."""
    busy_slot_steps: int
    num_slots: int
    replans: int = 0
    timeline: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    """(slot, prompt_idx, sample_idx, start_step, end_step), in finishing order as the engine records it."""

    @property
    def utilization(self) -> float:
        """Share of slot-steps that ran a sequence: ``busy_slot_steps / (num_slots * decode_steps)``, 1.0 if no step."""
        return self.busy_slot_steps / (self.num_slots * self.decode_steps) if self.decode_steps else 1.0


def simulate(
    lengths: list[int],
    predicted: list[float] | None,
    num_slots: int,
    policy: str = "fifo",
    group_size: int | None = None,
    planner: str = "auto",
    epsilon: float = 0.1,
    first_token_free: bool = True,
) -> SimResult:
    """Runs ``policy`` over sequences of the given ``lengths`` (prompt-major, ``group_size`` per
    prompt; default: one prompt) with per-sequence ``predicted`` lengths (None: no prediction)."""
    n = len(lengths)
    g = group_size or max(n, 1)
    seqs = [Sequence(i // g, i % g) for i in range(n)]  # sequence i = prompt_idx * g + sample_idx
    if predicted is not None:
        for s, p in zip(seqs, predicted, strict=True):
            s.predicted_length = float(p)
    durations = [max(n_tok - 1, 0) if first_token_free else n_tok for n_tok in lengths]
    slots = min(num_slots, n) if n else 1
    waiting = REFILL_POLICIES.get(policy)(seqs, slots, planner=planner, epsilon=epsilon)
    sched = Scheduler(waiting, slots)
    events: list[tuple[int, int, int]] = []  # (end step, slot, sequence index)

    def admit() -> None:
        while picks := sched.schedule():
            ends = [durations[seq.prompt_idx * g + seq.sample_idx] == 0 for _, seq in picks]
            for slot, seq in sched.start(picks, ends):  # a one-token completion never takes its slot
                i = seq.prompt_idx * g + seq.sample_idx
                heapq.heappush(events, (sched.now + durations[i], slot, i))

    admit()
    while events:
        sched.now = events[0][0]
        done = []
        while events and events[0][0] == sched.now:
            done.append(heapq.heappop(events))
        for _, slot, _ in sorted(done, key=lambda e: e[1]):  # the engine frees slots in slot order
            sched.finish(slot)
        admit()
    return SimResult(
        sched.now, durations, sum(durations), slots, getattr(waiting, "replans", 0), timeline=sched.timeline
    )


def naive_micro_group_steps(lengths: list[int], group_size: int, num_slots: int, first_token_free: bool = False) -> int:
    """Decode steps of naive micro-groups: each prompt's samples in rounds of ``num_slots``, each
    round as long as its longest member (HF ``generate`` round by round)."""
    steps = 0
    for p in range(0, len(lengths), group_size):
        group = lengths[p : p + group_size]
        for r in range(0, len(group), num_slots):
            steps += max(group[r : r + num_slots]) - (1 if first_token_free else 0)
    return steps
