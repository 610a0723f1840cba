"""Dynamic sampling: the engine draws prompts while it decodes, and replaces the groups that teach nothing.

    spec = DynamicSpec(target_groups=4, max_prompts=16, keep=judge)        # judge(i, group) -> informative?
    feed = DrawAndJudge(FeedPlan(8, 0, source=Replay(it), dynamic=spec, max_prompt_len=96))   # or Rounds(...)
    stats = engine.run(feed, num_slots=32)
    feed.trained()                      # the draw positions of the groups the step trains on; feed.summary()

The step needs ``target_groups`` informative groups (DAPO's dynamic sampling: a group whose rewards are all
equal has advantage 0 everywhere, no gradient). Prompts come from ``source`` (token ids) only as the pool
needs work; when the last sample of a group ends, ``spec.keep`` judges it right there (the caller scores it);
a dropped group's place goes to the next prompt. Two schemes, on the same engine and random streams (a
completion depends only on (seed, prompt position, sample index), so both decode the same completions of a
prompt):

- ``continuous`` (ours, :class:`DrawAndJudge`): a prompt is drawn when a free slot would otherwise wait and
  the groups in flight are not expected to be enough (``kept + rate x in_flight < target``, ``rate`` the
  informative share observed so far); the rollout ends the moment the target is met, and the sequences still
  running are cancelled (their tokens are counted as ``wasted_tokens``: a slot pool that refills has at most a
  pool's worth of them in flight; carrying them into the next step would sample them under the previous policy).
- ``rounds`` (verl's ``filter_groups``, :class:`Rounds`): ``round_size`` prompts decoded to their end, judged,
  then another round, until the target is met; informative groups past the target are trimmed (waste).

At ``max_prompts`` drawn with fewer informative groups than the target, the step trains on the informative
ones and, for the rest, the groups it dropped last (advantage 0: no gradient, and the update skips them), so
the loss keeps the normalization of a full batch (``capped``).

With adaptive groups (``grow``, continuous scheme only; :mod:`infgrpo.sampler.engine.adaptive`) a group without
spread is extended first; one still without spread when it cannot grow (its cap, or the budget) is dropped and
its place goes to a new prompt, while the step's sample budget holds a whole group.

The spec and the plan are pure data in :mod:`infgrpo.sampler.engine.plan`, the counts
(:class:`~infgrpo.sampler.engine.summaries.DynamicSummary`) in :mod:`infgrpo.sampler.engine.summaries`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infgrpo.sampler.engine.feed import Feed
from infgrpo.sampler.engine.summaries import DynamicSummary

if TYPE_CHECKING:
    from infgrpo.sampler.engine.adaptive import Extensions
    from infgrpo.sampler.engine.plan import FeedPlan


class PromptTooLong(ValueError):
    """A drawn prompt is longer than the pool's width (``max_prompt_len``): the sampler widens the pool to
    ``length`` and decodes the rollout again (an environment's observation of a later draw can be the longest)."""

    def __init__(self, length: int, max_prompt_len: int) -> None:
        super().__init__(f"a drawn prompt has {length} tokens, more than max_prompt_len={max_prompt_len}")
        self.length = length


@dataclass
class InformativeRate:
    """The share of groups that were informative, over recent rollouts: ``(kept + 1) / (judged + 2)``, each
    rollout's counts added to sums that decay by ``decay`` per rollout (so the estimate follows training)."""

    kept: float = 0.0
    judged: float = 0.0
    decay: float = 0.8

    def estimate(self) -> float:
        """The expected informative share of the next groups (0.5 before any was judged)."""
        return (self.kept + 1.0) / (self.judged + 2.0)

    def observe(self, kept: int, judged: int) -> None:
        """One rollout's groups: ``kept`` informative of ``judged``."""
        self.kept = self.kept * self.decay + kept
        self.judged = self.judged * self.decay + judged

    def state_dict(self) -> dict[str, float]:
        """The decayed sums (checkpointed: a resumed run admits as the interrupted one would have)."""
        return {"kept": self.kept, "judged": self.judged}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restores :meth:`state_dict`."""
        self.kept, self.judged = float(state["kept"]), float(state["judged"])


class DrawAndJudge(Feed):
    """The ``continuous`` scheme (see the module docstring): prompts drawn as slots free up, each group judged
    when it ends, the rollout over once ``spec.target_groups`` groups were kept.

    Args:
        plan: the rollout (:class:`~infgrpo.sampler.engine.plan.FeedPlan`): its ``source`` (prompts' token ids,
            drawn in order, read from the start), ``dynamic`` spec (the target, the cap and the judge),
            ``max_prompt_len`` (a longer drawn prompt raises :class:`PromptTooLong`: the sampler widens the pool
            and decodes again), and the random streams.
        predict: a drawn prompt's predicted completion length (for the length-aware refill policies), or None.
        grow: adaptive groups: a group without spread grows first, and is dropped only when it cannot grow.
    """

    def __init__(
        self, plan: FeedPlan, predict: Callable[[list[int]], float | None] | None = None, grow: Extensions | None = None
    ) -> None:
        spec = plan.dynamic
        if spec.max_prompts < spec.target_groups:
            raise ValueError(f"max_prompts={spec.max_prompts} must be >= target_groups={spec.target_groups}")
        streams = (plan.group_size, plan.seed, plan.prompt_offset)
        super().__init__(*streams, spec.max_prompts, plan.max_prompt_len, predict is not None, grow)
        self.source, self.spec, self.predict = plan.source.rewind(), spec, predict
        self.kept: list[int] = []
        self.dropped: list[int] = []
        self.exhausted = False

    # -- drawing ------------------------------------------------------------------------------
    def draw(self) -> bool:
        """Takes the next prompt from the source and queues its group; False when the source is exhausted."""
        try:
            prompt = list(next(self.source))
        except StopIteration:
            self.exhausted = True
            return False
        if len(prompt) > self.max_prompt_len:
            raise PromptTooLong(len(prompt), self.max_prompt_len)
        guess = self.predict(prompt) if self.predict is not None else None
        i = self.add_prompt(prompt, guess)
        self.sched.queue(self.groups[i])
        return True

    def in_flight(self) -> int:
        """Groups drawn and not judged yet."""
        return len(self.prompts) - len(self.kept) - len(self.dropped)

    def top_up(self) -> None:
        """Extensions first (with ``grow``), then draws a prompt while a free slot would otherwise wait and the groups
        in flight (stalled ones included) are not expected to be enough: ``kept + rate x in_flight < target``."""
        super().top_up()
        spec, sched = self.spec, self.sched
        while (
            self.may_draw()
            and len(self.kept) + spec.informative_rate * self.in_flight() < spec.target_groups
            and sched.wants_work()
        ):
            self.draw()

    def may_draw(self) -> bool:
        """Whether a prompt could be drawn now: the source holds more, ``max_prompts`` is not reached, and
        :meth:`can_draw`."""
        return not self.exhausted and len(self.prompts) < self.spec.max_prompts and self.can_draw()

    def can_draw(self) -> bool:
        """Whether another prompt may be drawn now: always without ``grow`` (the cap is ``max_prompts``), with it
        while the step's sample budget holds one more group."""
        return self.grow is None or self.grow.budget_left() >= self.group_size

    def draw_value(self) -> float | None:
        """A fresh prompt's informative groups per decoded token, ``rate / (group_size x L)`` with ``L`` the mean
        length of the rollout's ended samples; None when no prompt can be drawn now."""
        if not self.may_draw():
            return None
        ended = [len(s) for group in self.groups for s in group if s.finish_reason is not None]
        mean_length = max(1.0, sum(ended) / max(len(ended), 1))
        return self.spec.informative_rate / (self.group_size * mean_length)

    # -- judging ------------------------------------------------------------------------------
    def group_ended(self, i: int) -> None:
        """Judges the group: kept or dropped; with ``grow``, a group without spread that can grow is stalled (judged
        again when its extension ends) instead of dropped."""
        if self.grow is None:
            informative = self.spec.keep(i, self.groups[i])
        elif self.grow.ended(i):
            return
        else:
            informative = self.grow.spread[i]
        (self.kept if informative else self.dropped).append(i)

    def given_up(self, i: int) -> None:
        """A stalled group that will not grow is dropped."""
        self.dropped.append(i)

    def done(self) -> bool:
        """The target is met."""
        return len(self.kept) >= self.spec.target_groups

    # -- the result ---------------------------------------------------------------------------
    def trained(self) -> list[int]:
        """The target's informative groups, or at the cap the informative ones and the last dropped, ascending
        (stalled groups that cannot grow are dropped first)."""
        if self.grow is not None:
            self.grow.prune()
        target = self.spec.target_groups
        selected = self.kept[:target]
        if len(selected) < target:  # capped (or the source ran dry): fill with the groups dropped last
            selected = selected + self.dropped[len(self.dropped) - min(target - len(selected), len(self.dropped)) :]
        return sorted(selected)

    def summary(self) -> DynamicSummary:
        """The rollout's counts (see :class:`DynamicSummary`)."""
        selected = self.trained()
        tokens = [sum(len(s) for s in group) for group in self.groups]
        judged = set(self.kept) | set(self.dropped)
        trimmed = [i for i in self.kept if i not in selected]
        return DynamicSummary(
            prompts_drawn=len(self.prompts),
            groups_kept=len(self.kept),
            groups_dropped=len(self.dropped),
            groups_trained=len(selected),
            informative_rate=len(self.kept) / len(judged) if judged else 0.0,
            dropped_tokens=sum(tokens[i] for i in self.dropped),
            wasted_tokens=sum(tokens[i] for i in range(len(tokens)) if i not in judged)
            + sum(tokens[i] for i in trimmed),
            capped=len(self.kept) < self.spec.target_groups,
            cancelled_sequences=sum(1 for i in range(len(tokens)) if i not in judged for s in self.groups[i]),
        )


class Rounds(DrawAndJudge):
    """The ``rounds`` scheme (verl's ``filter_groups``): ``round_size`` prompts decoded to their end and judged,
    then the next round, until the target is met; informative groups past it are trimmed."""

    def top_up(self) -> None:
        """A new round once the last one is over and the target is not met."""
        spec, sched = self.spec, self.sched
        if sched.busy() or len(self.kept) >= spec.target_groups:
            return
        for _ in range(min(spec.round_size or spec.target_groups, spec.max_prompts - len(self.prompts))):
            if not self.draw():
                break

    def done(self) -> bool:
        """The target is met and the round is over."""
        return super().done() and not self.sched.busy()
