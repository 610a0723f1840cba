"""The scheduler on hand-built cases: which slot each sequence takes, one-token completions, idle slots,
prompt K/V references, and the free-slot stack. Every expectation is written out by hand."""

import numpy as np

from infgrpo.sampler.schedule.refill import REFILL_POLICIES, RefillPolicy
from infgrpo.sampler.schedule.scheduler import FreeSlots, Scheduler
from infgrpo.sampler.schedule.sequence import Sequence, SequenceStatus


def sequences(prompts, group_size):
    return [Sequence(p, j) for p in range(prompts) for j in range(group_size)]


def ids(picks):
    return [(slot, seq.prompt_idx, seq.sample_idx) for slot, seq in picks]


def test_free_slots_start_lowest_first_then_give_the_last_freed():
    free = FreeSlots(4)
    assert [free.take(), free.take(), free.take()] == [0, 1, 2]
    free.give_back(2)
    free.give_back(0)
    assert [free.take(), free.take(), free.take()] == [0, 2, 3] and len(free) == 0
    free.give_back(3, 1)  # taken and unused: they come back in the order given
    assert [free.take(), free.take()] == [3, 1]


def test_admission_fills_slots_in_order_and_one_token_completions_free_theirs_at_once():
    seqs = sequences(2, 3)  # prompt-major: (0,0) (0,1) (0,2) (1,0) (1,1) (1,2)
    sched = Scheduler(REFILL_POLICIES.get("fifo")(seqs, 4), 4, group_size=3, max_new_tokens=5, stop_ids=[2])
    picks = sched.schedule()
    assert ids(picks) == [(0, 0, 0), (1, 0, 1), (2, 0, 2), (3, 1, 0)]
    assert sched.to_prefill(picks) == [0, 1] and sched.held == {0: 3, 1: 3}
    ends = [sched.append(seq, token, -0.5) for (_, seq), token in zip(picks, [7, 2, 8, 9], strict=True)]
    assert ends == [False, True, False, False]  # (0, 1) drew the stop token first
    started = sched.start(picks, ends)
    assert ids(started) == [(0, 0, 0), (2, 0, 2), (3, 1, 0)]
    assert sched.timeline == [(-1, 0, 1, 0, 0)]  # it never took slot 1
    assert sched.release(s for (_, s), end in zip(picks, ends, strict=True) if end) == {0: 2, 1: 3}
    picks = sched.schedule()  # the next round: slot 1 again, for the next sequence in the queue
    assert ids(picks) == [(1, 1, 1)] and sched.to_prefill(picks) == []
    sched.start(picks, [False])
    assert sched.schedule() == [] and sorted(sched.running) == [0, 1, 2, 3]
    assert sched.release(s for _, s in [*started, *picks]) == {1: 1}  # prompt 0 is done with, prompt 1 waits
    assert [s.status for s in seqs] == [SequenceStatus.RUNNING, SequenceStatus.FINISHED] + [
        SequenceStatus.RUNNING
    ] * 3 + [SequenceStatus.WAITING]


def test_postprocess_appends_in_slot_order_and_refills_the_freed_slots():
    seqs = sequences(1, 4)
    sched = Scheduler(REFILL_POLICIES.get("fifo")(seqs, 2), 2, group_size=4, max_new_tokens=3, stop_ids=[2])
    for _ in range(2):
        picks = sched.schedule()
        sched.start(picks, [sched.append(s, 5, 0.0) for _, s in picks])
    assert sched.schedule() == []
    out = np.array([[6.0, -1.0], [2.0, -2.0]])  # slot 0 continues, slot 1 stops
    assert sched.postprocess(out) == [(1, seqs[1])] and sched.now == 1 and sched.busy_slot_steps == 2
    assert seqs[1].token_ids == [5, 2] and seqs[1].finish_reason == "stop"
    assert seqs[1].logprobs.dtype.is_floating_point and seqs[1].logprobs.tolist() == [0.0, -2.0]
    assert ids(sched.schedule()) == [(1, 0, 2)]  # the freed slot, at step 1
    assert sched.timeline == [(1, 0, 1, 0, 1)]
    out = np.array([[7.0, -1.0], [9.0, -1.0]])
    sched.start([(1, seqs[2])], [sched.append(seqs[2], 5, 0.0)])
    assert sched.postprocess(out) == [(0, seqs[0])]  # three tokens: max_new_tokens
    assert seqs[0].token_ids == [5, 6, 7] and seqs[0].finish_reason == "length"


class Reserve(RefillPolicy):
    """Fifo, but leaves slot 0 empty while more than one sequence waits (as 'planned' may)."""

    def pop(self, slot, now):
        return None if slot == 0 and len(self.queue) > 1 else self.queue.popleft()


def test_a_slot_the_policy_leaves_empty_is_held_until_admission_ends():
    seqs = sequences(1, 3)
    sched = Scheduler(Reserve(seqs, 3), 3, group_size=3, max_new_tokens=4)
    picks = sched.schedule()
    assert ids(picks) == [(1, 0, 0), (2, 0, 1)]
    sched.start(picks, [True, False])  # slot 1 comes back at once; slot 0 is held back
    assert ids(sched.schedule()) == [(1, 0, 2)] and len(sched.free) == 0
    sched.start([(1, seqs[2])], [False])
    assert sched.schedule() == [] and sched.free.take() == 0  # admission over: slot 0 is free again
