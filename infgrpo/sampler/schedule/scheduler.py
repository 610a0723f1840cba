"""Scheduler: the host side of one rollout, shared by the engine and the trace simulator.

It owns who waits (the refill policy, :mod:`infgrpo.sampler.schedule.refill`), who runs in which slot (the
running map and the free-slot stack), which prefilled prompts some sample still needs (prompt K/V
references), and the timeline. It does no device work: the engine's model runner prefills and
decodes, the simulator knows the lengths. One rollout in the engine::

    while picks := sched.schedule():                       # 1) an admission round: a sequence for each free slot
        runner.prefill(sched.to_prefill(picks))            #    the round's new prompts, in one forward
        ends = [sched.append(s, *runner.first_token(s)) for _, s in picks]
        started += sched.start(picks, ends)                #    one-token completions end here, slot given back
    ...                                                    # 2) copy K/V into the started slots
    ended = sched.postprocess(runner.decode())             # 3) append each slot's token, stop, free slots

**Admission**, in rounds until no slot is free or nothing waits (:meth:`Scheduler.schedule`,
:meth:`Scheduler.start`): take the free slots one by one and ask the policy for a sequence for each
(None leaves that slot idle until the admission ends); then learn which of the picked sequences end
on their first token (the engine prefills the round's new prompts together and reads their first
tokens; the simulator knows the lengths): those finish at once and their slots go back on the stack,
to be taken again first, in the order they were taken; the others start. Batching the round's
prompts into one prefill is why the picking comes first: a one-token completion is only known once
its prompt is prefilled. The simulator calls the same methods, so it makes the engine's decisions
exactly (tests compare every decode step and the timeline).

**Multi-turn samples** (tools, :mod:`infgrpo.sampler.engine.turns`): a sample whose turn ended waits away from the
pool (:meth:`Scheduler.leave`) and, when its tool results are in, :meth:`Scheduler.resume` queues it ahead of the
refill policy's work. A resumed sample (``turns > 0``) is not the policy's: the policy hears only of each sample's
first turn. With multi-turn samples every sample is counted in :attr:`Scheduler.live` from its first admission until
it finishes for good (:meth:`Scheduler.finished`): the engine keeps the prompt K/V of a prompt with live samples
(within a bound), so a resumed sample prefills only its tokens so far on top of them. The timeline has one entry per
turn.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable

import numpy as np
import torch

from infgrpo.sampler.schedule.refill import RefillPolicy
from infgrpo.sampler.schedule.sequence import Sequence, SequenceStatus


class FreeSlots:
    """The free slots of a pool as a stack: slot 0 is taken first, then always the last one given back."""

    def __init__(self, num_slots: int) -> None:
        self._stack = list(range(num_slots))[::-1]

    def take(self) -> int:
        """The next free slot (IndexError when none is free)."""
        return self._stack.pop()

    def give_back(self, *slots: int) -> None:
        """Frees ``slots``: the next :meth:`take` returns ``slots[0]``, then ``slots[1]``, ...

        Slots taken and left unused, given back in the order they were taken, leave the stack as it was.
        """
        self._stack.extend(reversed(slots))

    def __len__(self) -> int:
        """Slots free."""
        return len(self._stack)


class Scheduler:
    """The schedule of one rollout; see the module docstring.

    Args:
        policy: the refill policy holding every sequence of the rollout, all waiting.
        num_slots: slots of the pool.
        group_size: samples per prompt (each prefilled prompt is first needed by all of them).
        max_new_tokens, stop_ids: when :meth:`append` finishes a sequence (the engine; the simulator
            passes lengths instead).
    """

    def __init__(
        self,
        policy: RefillPolicy,
        num_slots: int,
        group_size: int = 1,
        max_new_tokens: int = 0,
        stop_ids: Iterable[int] = (),
        waiting: Callable[[int], int] | None = None,
    ) -> None:
        self.policy = policy
        self.free = FreeSlots(num_slots)
        self.running: dict[int, Sequence] = {}
        """slot -> the sequence decoding in it."""
        self.held: dict[int, int] = {}
        """Prefilled prompt -> its samples that still need its K/V (not yet copied into a slot, not ended)."""
        self.timeline: list[tuple[int, int, int, int, int]] = []
        """(slot, prompt_idx, sample_idx, start_step, end_step) of every finished sequence, in finishing
        order; slot -1 for a one-token completion, which never takes its slot."""
        self.now = 0
        """Decode steps so far (the simulator jumps it from one finishing event to the next)."""
        self.busy_slot_steps = 0
        self.group_size, self.max_new_tokens, self.stop_ids = group_size, max_new_tokens, set(stop_ids)
        self.waiting = waiting
        self.resumed: deque[Sequence] = deque()
        """Multi-turn samples back from their tools, served before the policy's queue."""
        self.away = 0
        """Multi-turn samples waiting on their tools (out of the pool)."""
        self.live: Counter[int] = Counter()
        """Multi-turn samples (``multi_turn``): prompt -> its samples admitted and not finished for good (running,
        waiting on tools or queued to resume): the prompts whose K/V a resume can build on."""
        self.multi_turn = False
        """Whether samples may leave for tools (the engine sets it for a rollout with turns)."""
        self._idle: list[int] = []  # slots the policy leaves empty until this admission ends

    # -- what a feed asks -----------------------------------------------------------------------
    def wants_work(self) -> bool:
        """Whether a free slot would wait at the next admission: fewer sequences queued than slots free."""
        return len(self.policy) + len(self.resumed) < len(self.free)

    def busy(self) -> bool:
        """Whether any sequence is running, queued or waiting on its tools."""
        return bool(self.running) or len(self.policy) > 0 or bool(self.resumed) or self.away > 0

    def queue(self, seqs: list[Sequence]) -> None:
        """Queues ``seqs`` in the refill policy, now (a feed's new work)."""
        self.policy.extend(seqs, self.now)

    def leave(self, seq: Sequence) -> None:
        """``seq`` (its turn ended, its slot freed) waits on its tools, out of the pool."""
        self.away += 1

    def resume(self, seq: Sequence) -> None:
        """``seq`` is back from its tools and goes on: queued ahead of new work (served first come, first served)."""
        self.away -= 1
        seq.slot, seq.start_step, seq.end_step = -1, -1, -1
        self.resumed.append(seq)

    def back(self, seq: Sequence) -> None:
        """``seq`` is back from its tools and ends there (its tool results rolled back, or no room left)."""
        self.away -= 1

    def finished(self, seq: Sequence) -> None:
        """A multi-turn sample finished for good (no more turns): it no longer counts in :attr:`live`."""
        self.live[seq.prompt_idx] -= 1
        if not self.live[seq.prompt_idx]:
            del self.live[seq.prompt_idx]

    # -- admission ----------------------------------------------------------------------------
    def schedule(self) -> list[tuple[int, Sequence]]:
        """One admission round: (slot, sequence) for each free slot the policy fills; [] ends the admission.

        A slot the policy leaves empty is held back until then, and given back afterwards.
        """
        picks: list[tuple[int, Sequence]] = []
        while (len(self.policy) or self.resumed) and len(self.free):
            slot = self.free.take()
            seq = self.resumed.popleft() if self.resumed else self.policy.pop(slot, self.now)
            if seq is None:
                self._idle.append(slot)
            else:
                picks.append((slot, seq))
        if not picks:
            self.free.give_back(*self._idle)
            self._idle = []
        return picks

    def to_prefill(self, picks: list[tuple[int, Sequence]]) -> list[int]:
        """The prompts of ``picks`` not prefilled yet, ascending (the round's prefill); from now on held. Resumed
        samples need none."""
        new = sorted({seq.prompt_idx for _, seq in picks if seq.prompt_idx not in self.held and not seq.turns})
        self.held.update({i: self.waiting(i) if self.waiting is not None else self.group_size for i in new})
        return new

    def start(self, picks: list[tuple[int, Sequence]], ends: list[bool]) -> list[tuple[int, Sequence]]:
        """Starts a round's picks at step ``now``; returns the (slot, sequence) pairs that run.

        ``ends[i]``: ``picks[i]`` ended on its first token; it finishes at once, and its slot goes back
        on the stack (taken again first, in the order taken).
        """
        started, freed = [], []
        for (slot, seq), end in zip(picks, ends, strict=True):
            seq.start_step = self.now
            if self.multi_turn and not seq.turns:  # a sample's first admission: live until it finishes for good
                self.live[seq.prompt_idx] += 1
            if end:
                if not seq.turns:  # the policy popped only the first turn
                    self.policy.finished(seq, slot, self.now)
                self.record(seq)
                freed.append(slot)
            else:
                seq.slot, seq.status = slot, SequenceStatus.RUNNING
                self.running[slot] = seq
                started.append((slot, seq))
        self.free.give_back(*freed)
        return started

    def release(self, seqs: Iterable[Sequence]) -> dict[int, int]:
        """``seqs`` need their prompts' K/V no more (copied into their slots, or ended); returns :attr:`held`.
        Resumed samples held none."""
        for seq in seqs:
            if seq.turns:
                continue
            self.held[seq.prompt_idx] -= 1
            if self.held[seq.prompt_idx] == 0:
                del self.held[seq.prompt_idx]
        return self.held

    # -- decoding -----------------------------------------------------------------------------
    def append(self, seq: Sequence, token: int, logp: float) -> bool:
        """Appends a token and its log-prob to ``seq``; whether that finished it (a stop token, or max_new_tokens).

        A finished sequence keeps its log-probs as a float32 tensor (len(seq),): 4 bytes a token, not 32.
        """
        seq.token_ids.append(token)
        seq.logprobs.append(logp)
        if seq.tool_mask is not None:  # a multi-turn sample: the model's token
            seq.tool_mask.append(1)
        if token in self.stop_ids:
            seq.finish_reason = "stop"
        elif len(seq) >= self.max_new_tokens:
            seq.finish_reason = "length"
        else:
            return False
        seq.status = SequenceStatus.FINISHED
        seq.logprobs = torch.tensor(seq.logprobs, dtype=torch.float32)
        return True

    def postprocess(self, out: np.ndarray) -> list[tuple[int, Sequence]]:
        """After a decode step: appends each running slot's token from ``out`` (S, 2) (token, log-prob),
        in slot order; returns (slot, sequence) of each sequence that finished (its slot is free again)."""
        self.now += 1
        self.busy_slot_steps += len(self.running)
        ended = []
        for slot in sorted(self.running):
            if self.append(self.running[slot], int(out[slot, 0]), float(out[slot, 1])):
                ended.append((slot, self.finish(slot)))
        return ended

    def finish(self, slot: int) -> Sequence:
        """The sequence in ``slot`` ended at step ``now``: frees the slot, tells the policy, records it."""
        seq = self.running.pop(slot)
        self.free.give_back(slot)
        if not seq.turns:  # the policy popped only the first turn
            self.policy.finished(seq, slot, self.now)
        self.record(seq)
        return seq

    def record(self, seq: Sequence) -> None:
        """Puts a sequence that ended at step ``now`` on the timeline."""
        seq.end_step = self.now
        self.timeline.append((seq.slot, seq.prompt_idx, seq.sample_idx, seq.start_step, seq.end_step))
