"""Feeds: what enters the slot pool, and what happens when a group ends. The engine's one loop asks; a feed decides.

    feed = FixedBatch(prompts, group_size=8, seed=0)        # these prompts x G, queued at once (``sample``)
    stats = engine.run(feed, num_slots=16)                   # decodes until ``feed.done()`` or nothing runs
    feed.groups[i]                                           # prompt i's sequences, in sample order

A feed owns the rollout's prompts and their groups of :class:`~infgrpo.sampler.schedule.sequence.Sequence` (sample j of
prompt i has the random stream (seed, prompt_offset + i, j), whoever queues it and whenever). The engine calls:

1. :meth:`Feed.initial` once: the sequences the refill policy starts with (the fixed batch: all of them);
2. :meth:`Feed.bind` once: the rollout's :class:`~infgrpo.sampler.schedule.scheduler.Scheduler` (its refill policy is
   the queue: a feed queues work with ``sched.queue(seqs)``);
3. :meth:`Feed.top_up` before every admission: queue more work if the feed wants to (dynamic sampling draws
   prompts here);
4. :meth:`Feed.ended` with the sequences that finished (after each decode step, and for one-token
   completions during admission); it counts each group's samples and calls :meth:`Feed.group_ended` the
   moment a group's last queued sample ends (groups in prompt order) -- where dynamic sampling judges a
   group, and where a feed may queue more samples of the same prompt (the next sample indices; a group is
   "ended" again when those end);
5. :meth:`Feed.done` after every step: whether the rollout may stop now (sequences still running are
   cancelled). The loop also stops when nothing runs and nothing can be admitted.

Afterwards :meth:`Feed.trained` names the prompts the step trains on, :meth:`Feed.rows` the ``group_size``
samples of each (a group that grew beyond it is down-selected there) and :meth:`Feed.summary` what a judging feed
found.

Adaptive groups are a component, not a kind of feed: a feed built with ``grow``
(:class:`~infgrpo.sampler.engine.adaptive.Extensions`) hands each ended group to it, lets it queue extensions
before its own work at admission, and trains on the samples it selects; a stalled group that cannot grow is
:meth:`Feed.given_up`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infgrpo.sampler.engine.counter_rng import stream_key
from infgrpo.sampler.schedule.scheduler import Scheduler
from infgrpo.sampler.schedule.sequence import Sequence

if TYPE_CHECKING:
    from infgrpo.sampler.engine.adaptive import Extensions
    from infgrpo.sampler.engine.summaries import DynamicSummary


class Feed:
    """The base of every feed: prompts, groups, and each group's samples still to end (see the module docstring).

    Args:
        group_size: samples each prompt starts with (also how many need its prefilled K/V at first).
        seed, prompt_offset: the random streams: sample j of the i-th prompt fed draws from
            (seed, prompt_offset + i, j).
        max_prompts: the most prompts the feed can yield.
        max_prompt_len: the longest prompt the feed can yield (the pool's width is this + max_new_tokens).
        predicted: whether sequences carry predicted lengths (the length-aware refill policies need them;
            without, the engine runs ``fifo``).
        grow: adaptive groups (:class:`~infgrpo.sampler.engine.adaptive.Extensions`): stalled groups get more
            samples; None: every group keeps ``group_size``.
    """

    def __init__(
        self,
        group_size: int,
        seed: int,
        prompt_offset: int,
        max_prompts: int,
        max_prompt_len: int,
        predicted: bool,
        grow: Extensions | None = None,
    ) -> None:
        self.group_size, self.seed, self.prompt_offset = group_size, seed, prompt_offset
        self.max_prompt_len, self.predicted, self.grow = max_prompt_len, predicted, grow
        # the most sequences the rollout can hold (the pool is never larger)
        self.max_sequences = max_prompts * group_size if grow is None else grow.spec.max_sequences(max_prompts)
        self.prompts: list[list[int]] = []
        self.groups: list[list[Sequence]] = []
        self.left: list[int] = []  # samples of each prompt queued, running or waiting, not ended yet
        self.sched: Scheduler | None = None
        if grow is not None:
            grow.attach(self)

    # -- what the engine calls ----------------------------------------------------------------
    def initial(self) -> list[Sequence]:
        """The sequences the refill policy starts with (default: none; :meth:`top_up` queues the work)."""
        return []

    def bind(self, sched: Scheduler) -> None:
        """The rollout's scheduler: its ``policy`` is the queue, ``free`` and ``running`` the pool's state."""
        self.sched = sched

    def top_up(self) -> None:
        """Before an admission: queues more work, if any (default: extensions of stalled groups, with ``grow``)."""
        if self.grow is not None:
            self.grow.top_up()

    def ended(self, seqs: list[Sequence]) -> None:
        """Counts ``seqs`` as finished; each group whose last queued sample this was ends (in prompt order)."""
        done = []
        for seq in seqs:
            self.left[seq.prompt_idx] -= 1
            if self.left[seq.prompt_idx] == 0:
                done.append(seq.prompt_idx)
        for i in sorted(done):
            self.group_ended(i)

    def group_ended(self, i: int) -> None:
        """Every queued sample of prompt ``i`` ended (default: ``grow`` judges it, and a stalled group waits for an
        extension; without ``grow`` nothing to decide)."""
        if self.grow is not None:
            self.grow.ended(i)

    def done(self) -> bool:
        """Whether the rollout may stop now (default: once every queued sample ended and no stalled group can grow)."""
        return not any(self.left) and not (self.grow is not None and self.grow.extendable())

    def trained(self) -> list[int]:
        """The prompts the step trains on, ascending (default: every prompt fed)."""
        return list(range(len(self.prompts)))

    def rows(self, i: int) -> list[Sequence]:
        """The ``group_size`` samples of prompt ``i`` the step trains on (its group; one that grew, down-selected)."""
        return self.grow.rows(i) if self.grow is not None else self.groups[i]

    def row_prompt(self, i: int) -> list[int]:
        """The prompt of trained row ``i`` (``Rollouts.prompt_ids``; default: prompt ``i``'s ids)."""
        return self.prompts[i]

    def waiting(self, i: int) -> int:
        """Samples of prompt ``i`` that have not started (each needs its prefilled K/V)."""
        return sum(1 for s in self.groups[i] if not s.token_ids)

    def summary(self) -> DynamicSummary | None:
        """What a judging feed found (``Rollouts.dynamic``; default: None, every prompt was given)."""
        return None

    # -- what ``grow`` asks -------------------------------------------------------------------
    def given_up(self, i: int) -> None:
        """Prompt ``i``'s group stalled and will not grow (default: it is trained on anyway, advantage 0)."""

    def draw_value(self) -> float | None:
        """Informative groups per decoded token of a prompt drawn now, or None when none can be drawn (default)."""
        return None

    # -- for feeds ----------------------------------------------------------------------------
    def add_prompt(self, prompt: list[int], predicted_length: float | None = None) -> int:
        """Feeds a prompt with its first ``group_size`` samples (not queued); returns its index."""
        i = len(self.prompts)
        self.prompts.append(prompt)
        self.groups.append([])
        self.left.append(0)
        self.add_samples(i, self.group_size, predicted_length)
        return i

    def add_samples(self, i: int, k: int, predicted_length: float | None = None) -> list[Sequence]:
        """``k`` more samples of prompt ``i``, their sample indices continuing its group's; returns them (the
        caller queues them)."""
        group = self.groups[i]
        key = self.prompt_offset + i
        new = [Sequence(i, j, key=stream_key(self.seed, key, j)) for j in range(len(group), len(group) + k)]
        if predicted_length is not None:
            for s in new:
                s.predicted_length = predicted_length
        group.extend(new)
        self.left[i] += k
        return new


class FixedBatch(Feed):
    """``group_size`` samples of each of ``prompts``, all queued at the start (``MicroGroupSampler.sample``).

    ``predicted_lengths`` (one per prompt) order the work for the length-aware refill policies. With ``grow``,
    stalled groups get more samples as slots free up, and every prompt is trained on.
    """

    def __init__(
        self,
        prompts: list[list[int]],
        group_size: int,
        seed: int,
        predicted_lengths: list[float] | None = None,
        prompt_offset: int = 0,
        grow: Extensions | None = None,
    ) -> None:
        super().__init__(
            group_size, seed, prompt_offset, len(prompts), max(map(len, prompts)), predicted_lengths is not None, grow
        )
        for i, prompt in enumerate(prompts):
            self.add_prompt(prompt, None if predicted_lengths is None else float(predicted_lengths[i]))

    def initial(self) -> list[Sequence]:
        """Every sequence, prompt-major."""
        return [s for group in self.groups for s in group]
