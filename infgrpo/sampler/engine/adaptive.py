"""Adaptive groups: a prompt whose samples ended without a reward spread gets more samples, inside the slot pool.

    spec = AdaptiveSpec(spread=judge, select=pick, max_samples_per_prompt=64, max_samples_per_step=256)
    feed = AdaptiveBatch(prompts, group_size=8, seed=0, spec=spec)       # or adaptive_dynamic_feed(...)
    stats = engine.run(feed, num_slots=16)
    feed.rows(i)                                 # the group_size samples of prompt i the step trains on

GRPO learns nothing from a group whose rewards are all equal (advantage 0). On a hard prompt (success rate
p = 0.5%), a group of 8 is almost always all wrong, while 64 samples hold a right answer 27% of the time and
256 samples 72%. A prompt starts with ``group_size`` samples; when its group ends, ``spec.spread`` judges it
(the caller scores it, as dynamic sampling does); a group with no spread is **stalled** and may be extended:
more samples of the same prompt, sample indices continuing (sample j keeps the stream (seed, i, j, t), so a
completion does not depend on when or whether the prompt was extended), queued when slots free up, beside the
other prompts' samples (no round barrier). A group stops growing when it has a spread (**rescued** if it had
none at ``group_size``), when it holds ``max_samples_per_prompt`` samples, or when the step's
``max_samples_per_step`` samples (every sample decoded, the first ``group_size`` of each prompt included) are
spent. The prompt's K/V are not kept between its group's end and its extension: the extension prefills the
prompt again (batched with the other prompts admitted with it), a prompt's length in prefill tokens per
extension, against ``extend_by`` completions decoded.

Who gets the next samples (``rule``), asked each time free slots would otherwise wait:

- ``uniform``: the stalled groups in the order they stalled (a group extended and stalled again goes last).
- ``value``: the stalled group with the largest expected rescue per decoded token,
  ``v_i = P_i(k) / (k * L_i)``, with ``k`` the samples the extension adds, ``L_i`` the mean length of the
  group's finished samples (the best estimate of its cost we have: the same prompt, the current policy) and
  ``P_i(k)`` the chance that ``k`` more samples contain one whose reward differs, after ``n_i`` that all agree:
  under a Beta(a, b) prior on the rate ``q`` at which a sample of that prompt differs from its stalled value,
  ``P_i(k) = 1 - E[(1 - q)^k | n_i agree] = 1 - B(a, b + n_i + k) / B(a, b + n_i)``. The prior is the rescue
  rate observed so far for groups stalled at the same reward level (e.g. all wrong vs all right: how often an
  extension of such a group found a differing sample, per sample drawn), ``a = s * r``, ``b = s * (1 - r)``
  with strength ``s`` = :data:`PRIOR_STRENGTH`; before any was observed, Jeffreys' Beta(1/2, 1/2). It spends
  the budget where a rescue is likeliest per token: short prompts before long ones, groups stalled few times
  before groups stalled often, and reward levels that get rescued before levels that never do.
- ``value_or_draw`` (with dynamic sampling): ``value``, and a stalled group is given up (dropped, its place
  going to a new prompt) when its ``v_i`` is below a fresh draw's, ``d = rate / (group_size * L)``, with
  ``rate`` the informative share of fresh groups (dynamic sampling's learned estimate) and ``L`` the mean
  length of the rollout's ended samples: the next samples go to the likelier gradient per token, an extension
  or a new prompt. Without a prompt to draw (no dynamic sampling, the source or ``max_prompts`` spent, the
  budget short of a group) it is ``value``.

The update trains on ``group_size`` samples of every prompt (:meth:`rows`): all of them when the group did not
grow, else ``spec.select``'s choice (the caller's PODS rule: the subset of largest reward variance).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from infgrpo.sampler.engine.dynamic import DrawAndJudge, DynamicSpec
from infgrpo.sampler.engine.feed import FixedBatch
from infgrpo.sampler.schedule.sequence import Sequence

Rule = Literal["uniform", "value", "value_or_draw"]
PRIOR_STRENGTH = 2.0  # the prior's weight in samples: a weak prior, the prompt's own samples soon dominate


@dataclass
class AdaptiveSpec:
    """How adaptive groups grow, and how the caller judges and selects (see the module docstring)."""

    spread: Callable[[int, list[Sequence]], bool]
    """``spread(i, group)``: whether the ended samples of prompt ``i`` have a reward spread."""
    select: Callable[[int, list[Sequence], int], list[int]]
    """``select(i, group, m)``: the ``m`` samples (indices into ``group``) the step trains on."""
    max_samples_per_prompt: int
    """Most samples of one prompt (>= the group size)."""
    max_samples_per_step: int
    """Most samples decoded in the rollout, the first samples of every prompt included."""
    rule: Rule = "value"
    extend_by: int = 0
    """Samples an extension adds (0: the group size)."""
    level: Callable[[int], Hashable] | None = None
    """``level(i)``: the reward level prompt ``i`` stalled at (its rule-``value`` prior's key); None: one prior."""
    rates: RescueRates | None = None
    """The rescue rates observed in earlier rollouts (the sampler keeps them across rollouts)."""


@dataclass
class RescueRates:
    """Per reward level, the samples drawn by extensions of stalled groups and the extensions that found a spread,
    as sums decaying by ``decay`` per rollout (the value rule's prior; checkpointed)."""

    drawn: dict[str, float] = field(default_factory=dict)
    found: dict[str, float] = field(default_factory=dict)
    decay: float = 0.8

    def prior(self, level: Hashable) -> tuple[float, float]:
        """Beta(a, b) on the rate a sample differs from a group stalled at ``level``: Jeffreys' before any data."""
        key = str(level)
        if self.drawn.get(key, 0.0) <= 0.0:
            return 0.5, 0.5
        rate = (self.found[key] + 0.5) / (self.drawn[key] + 1.0)
        return PRIOR_STRENGTH * rate, PRIOR_STRENGTH * (1.0 - rate)

    def observe(self, counts: dict[str, tuple[int, int]]) -> None:
        """One rollout's ``{level: (samples drawn by extensions, extensions that found a spread)}``."""
        for key in set(self.drawn) | set(counts):
            drawn, found = counts.get(key, (0, 0))
            self.drawn[key] = self.drawn.get(key, 0.0) * self.decay + drawn
            self.found[key] = self.found.get(key, 0.0) * self.decay + found

    def state_dict(self) -> dict[str, Any]:
        """The decayed sums."""
        return {"drawn": dict(self.drawn), "found": dict(self.found)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`."""
        self.drawn = {k: float(v) for k, v in state["drawn"].items()}
        self.found = {k: float(v) for k, v in state["found"].items()}


def log_beta(a: float, b: float) -> float:
    """log B(a, b)."""
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def rescue_chance(n: int, k: int, a: float, b: float) -> float:
    """``P(k)``: the chance that ``k`` more samples hold one that differs after ``n`` agreed, under Beta(a, b)."""
    return 1.0 - math.exp(log_beta(a, b + n + k) - log_beta(a, b + n))


class Extensions:
    """The extension bookkeeping of one rollout: stalled groups, the budget, the allocation rule, the counters.

    A feed calls :meth:`ended` when a group ends (returns whether it is stalled and may grow), :meth:`top_up`
    at admission (queues extensions while free slots would otherwise wait) and :meth:`rows` at the end.
    """

    def __init__(
        self, feed: FixedBatch | DrawAndJudge, spec: AdaptiveSpec, give_up: Callable[[int], None] | None = None
    ) -> None:
        if spec.max_samples_per_prompt < feed.group_size:
            raise ValueError(
                f"max_samples_per_prompt={spec.max_samples_per_prompt} must be >= group_size={feed.group_size}"
            )
        self.feed, self.spec, self.give_up = feed, spec, give_up
        self.extend_by = spec.extend_by or feed.group_size
        self.rates = spec.rates if spec.rates is not None else RescueRates()
        self.stalled: list[int] = []  # groups waiting for an extension, in stall order
        self.spread: dict[int, bool] = {}  # each ended group's last judgement
        self.stalled_at_g: set[int] = set()  # groups without spread at group_size
        self.extensions: dict[int, int] = {}  # prompt -> extensions queued
        self.pending: dict[int, int] = {}  # prompt -> samples of its running extension (its judgement counts them)
        self.counts: dict[str, tuple[int, int]] = {}  # level -> (extension samples drawn, extensions that found)

    # -- the budget -----------------------------------------------------------------------------
    def samples(self) -> int:
        """Samples fed so far (queued, running or ended)."""
        return sum(len(g) for g in self.feed.groups)

    def room(self, i: int) -> int:
        """How many samples prompt ``i`` may still get: its cap, and the step's budget."""
        cap = self.spec.max_samples_per_prompt - len(self.feed.groups[i])
        return max(0, min(cap, self.spec.max_samples_per_step - self.samples()))

    def budget_left(self) -> int:
        """Samples the step may still feed."""
        return max(0, self.spec.max_samples_per_step - self.samples())

    # -- what the feed calls ----------------------------------------------------------------------
    def ended(self, i: int) -> bool:
        """Judges prompt ``i``'s ended group; True when it is stalled and queued for an extension."""
        spread = bool(self.spec.spread(i, self.feed.groups[i]))
        self.spread[i] = spread
        if i in self.pending:  # an extension ended: did it find a spread?
            key = self.level_key(i)
            drawn, found = self.counts.get(key, (0, 0))
            self.counts[key] = (drawn + self.pending.pop(i), found + int(spread))
        elif not spread:
            self.stalled_at_g.add(i)
        if spread or self.room(i) == 0:
            return False
        self.stalled.append(i)
        return True

    def extendable(self) -> bool:
        """Whether some stalled group can still grow (those that cannot are given up)."""
        self.prune()
        return bool(self.stalled)

    def prune(self) -> None:
        """Stalled groups without room (the budget is spent) are given up: the feed hears of each."""
        for i in [i for i in self.stalled if self.room(i) == 0]:
            self.stalled.remove(i)
            if self.give_up is not None:
                self.give_up(i)

    def top_up(self) -> None:
        """Queues extensions by the rule while free slots would otherwise wait."""
        sched = self.feed.sched
        while self.stalled and len(sched.policy) < len(sched.free):
            self.prune()
            if not self.stalled:
                return
            i = self.pick()
            self.stalled.remove(i)
            if self.give_up is not None and self.drawing_beats(i):
                self.give_up(i)
                continue
            k = min(self.extend_by, self.room(i))
            new = self.feed.add_samples(i, k)
            self.extensions[i] = self.extensions.get(i, 0) + 1
            self.pending[i] = k
            sched.policy.extend(new, sched.now)

    def pick(self) -> int:
        """The stalled group the rule extends next."""
        if self.spec.rule == "uniform":
            return self.stalled[0]
        return max(self.stalled, key=self.value)  # ties: the earliest stalled

    def value(self, i: int) -> float:
        """The rule-``value`` score of extending prompt ``i`` now (see the module docstring)."""
        group = self.feed.groups[i]
        k = min(self.extend_by, self.room(i))
        a, b = self.rates.prior(self.level_key(i))
        mean_length = max(1.0, sum(len(s) for s in group) / len(group))
        return rescue_chance(len(group), k, a, b) / (k * mean_length)

    def drawing_beats(self, i: int) -> bool:
        """Rule ``value_or_draw``: whether a fresh prompt's group is likelier to carry a gradient per decoded token
        than extending prompt ``i`` (False where no prompt can be drawn now)."""
        feed = self.feed
        if self.spec.rule != "value_or_draw" or not isinstance(feed, DrawAndJudge) or not feed.may_draw():
            return False
        ended = [len(s) for group in feed.groups for s in group if s.finish_reason is not None]
        mean_length = max(1.0, sum(ended) / max(len(ended), 1))
        return self.value(i) < feed.spec.informative_rate / (feed.group_size * mean_length)

    def level_key(self, i: int) -> str:
        """The reward level prompt ``i`` stalled at (the prior's key)."""
        return str(self.spec.level(i)) if self.spec.level is not None else "all"

    def rows(self, i: int) -> list[Sequence]:
        """The ``group_size`` samples of prompt ``i`` the step trains on (ascending sample index)."""
        group, g = self.feed.groups[i], self.feed.group_size
        ended = [s for s in group if s.finish_reason is not None]
        if len(group) == g:
            return group
        if len(ended) < g:  # cancelled mid-extension: the first group_size ended samples are at least g
            ended = group[:g]
        picked = sorted(self.spec.select(i, ended, g)) if self.spread.get(i) else list(range(g))
        return [ended[j] for j in picked]

    def finish(self) -> None:
        """The rollout is over: its rescue counts join the rates."""
        self.rates.observe(self.counts)

    def stats(self) -> dict[str, Any]:
        """``adaptive/*`` counters: samples per prompt, extended and rescued groups, extension samples and
        tokens, the budget used, cancelled samples."""
        feed, g = self.feed, self.feed.group_size
        sizes = [len(group) for group in feed.groups]
        extra = [s for group in feed.groups for s in group[g:]]
        cancelled = [s for group in feed.groups for s in group if s.finish_reason is None]
        rescued = [i for i in self.stalled_at_g if self.spread.get(i)]
        return {
            "adaptive/samples_per_prompt_mean": sum(sizes) / max(len(sizes), 1),
            "adaptive/samples_per_prompt_max": max(sizes, default=0),
            "adaptive/groups_stalled": len(self.stalled_at_g),
            "adaptive/groups_extended": len(self.extensions),
            "adaptive/groups_rescued": len(rescued),
            "adaptive/extension_samples": len(extra),
            "adaptive/extension_tokens": sum(len(s) for s in extra),
            "adaptive/budget_used": sum(sizes) / self.spec.max_samples_per_step,
            "adaptive/cancelled_samples": len(cancelled),
            "adaptive/cancelled_tokens": sum(len(s) for s in cancelled),
        }

    def rescued(self) -> list[int]:
        """The prompts without a spread at ``group_size`` that got one by extension."""
        return sorted(i for i in self.stalled_at_g if self.spread.get(i))


class AdaptiveBatch(FixedBatch):
    """A fixed batch whose stalled groups grow (see the module docstring); every prompt is trained on."""

    def __init__(
        self,
        prompts: list[list[int]],
        group_size: int,
        seed: int,
        spec: AdaptiveSpec,
        predicted_lengths: list[float] | None = None,
        prompt_offset: int = 0,
    ) -> None:
        super().__init__(prompts, group_size, seed, predicted_lengths, prompt_offset)
        self.max_sequences = min(len(prompts) * spec.max_samples_per_prompt, spec.max_samples_per_step)
        self.extensions = Extensions(self, spec)

    def group_ended(self, i: int) -> None:
        """Judges the group; a stalled one waits for an extension."""
        self.extensions.ended(i)

    def top_up(self) -> None:
        """Extensions, while free slots would otherwise wait."""
        self.extensions.top_up()

    def done(self) -> bool:
        """Every queued sample ended and no stalled group can grow."""
        return super().done() and not self.extensions.extendable()

    def rows(self, i: int) -> list[Sequence]:
        """The ``group_size`` samples of prompt ``i`` the step trains on."""
        return self.extensions.rows(i)

    def stats(self) -> dict[str, Any]:
        """``adaptive/*``."""
        self.extensions.finish()
        return self.extensions.stats()


class AdaptiveDrawAndJudge(DrawAndJudge):
    """Dynamic sampling with adaptive groups: a group without spread is extended first; one still without spread
    when it cannot grow (its cap, or the budget) is dropped and its place goes to a new prompt."""

    def __init__(
        self,
        source: Iterator[list[int]],
        group_size: int,
        seed: int,
        spec: DynamicSpec,
        adaptive: AdaptiveSpec,
        max_prompt_len: int,
        predict: Callable[[list[int]], float | None] | None = None,
        prompt_offset: int = 0,
    ) -> None:
        super().__init__(source, group_size, seed, spec, max_prompt_len, predict, prompt_offset)
        self.max_sequences = min(spec.max_prompts * adaptive.max_samples_per_prompt, adaptive.max_samples_per_step)
        self.extensions = Extensions(self, adaptive, give_up=self.dropped.append)

    def group_ended(self, i: int) -> None:
        """Kept with a spread; stalled (judged again after its extension) while it can grow; else dropped."""
        if self.extensions.ended(i):
            return
        (self.kept if self.extensions.spread[i] else self.dropped).append(i)

    def top_up(self) -> None:
        """Extensions first, then new prompts by the draw rule (stalled groups count as in flight), while free
        slots would otherwise wait and the budget holds a whole group."""
        self.extensions.top_up()
        super().top_up()

    def can_draw(self) -> bool:
        """The step's budget holds one more group."""
        return self.extensions.budget_left() >= self.group_size

    def trained(self) -> list[int]:
        """As dynamic sampling's, once the stalled groups that cannot grow are dropped."""
        self.extensions.prune()
        return super().trained()

    def rows(self, i: int) -> list[Sequence]:
        """The ``group_size`` samples of prompt ``i`` the step trains on."""
        return self.extensions.rows(i)

    def stats(self) -> dict[str, Any]:
        """``dynamic/*`` and ``adaptive/*``."""
        self.extensions.finish()
        return {**super().stats(), **self.extensions.stats()}
