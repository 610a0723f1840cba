"""Admission: which waiting sequences take the free slots, shared by the engine and the trace simulator.

The rule, in rounds until no slot is free or nothing waits:

1. pop the free stack; for each slot ask the refill policy for a sequence (None leaves that slot
   idle until the next one frees);
2. ask ``ends_at_once`` which of the popped sequences end on their first token (the engine prefills
   the new prompts of the round together, in one forward, and reads their first tokens; the
   simulator knows the lengths): those finish at once and their slots go back on the stack;
3. the others start in their slots.

Batching the round's prompts into one prefill is why the popping comes first: a one-token
completion is only known once its prompt is prefilled. The simulator calls the same function, so it
makes the engine's decisions exactly.
"""

from __future__ import annotations

from collections.abc import Callable

from infgrpo.sampler.refill import RefillPolicy
from infgrpo.sampler.sequence import Sequence


def admit(
    waiting: RefillPolicy,
    free: list[int],
    now: int,
    ends_at_once: Callable[[list[Sequence]], list[bool]],
    on_finish: Callable[[Sequence, int], None],
) -> list[tuple[int, Sequence]]:
    """Fills free slots at decode step ``now``; returns the (slot, sequence) pairs that start running.

    ``free`` is the pool's free stack (popped from the end, changed in place). ``on_finish(seq, slot)``
    is called for each sequence that ends on its first token, right after the policy hears of it.
    """
    started: list[tuple[int, Sequence]] = []
    idle: list[int] = []  # slots the policy leaves empty for now
    while len(waiting) and free:
        picks: list[tuple[int, Sequence]] = []
        while len(waiting) and free:
            slot = free.pop()
            seq = waiting.pop(slot, now)
            if seq is None:
                idle.append(slot)
                continue
            picks.append((slot, seq))
        freed = []
        for (slot, seq), ends in zip(picks, ends_at_once([s for _, s in picks]), strict=True):
            if ends:
                waiting.finished(seq, slot, now)
                on_finish(seq, slot)
                freed.append(slot)
            else:
                started.append((slot, seq))
        free.extend(reversed(freed))  # popped again lowest first, as they came off the stack
    free.extend(reversed(idle))
    return started
