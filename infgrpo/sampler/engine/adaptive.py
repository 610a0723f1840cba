"""Adaptive groups: a prompt whose samples ended without a reward spread gets more samples, inside the slot pool.

    spec = AdaptiveSpec(judge, max_samples_per_prompt=64, max_samples_per_step=256)  # judge: spread, level, select
    feed = FixedBatch(prompts, group_size=8, seed=0, grow=Extensions(spec, rates))    # or DrawAndJudge(..., grow=)
    stats = engine.run(feed, num_slots=16)
    feed.rows(i)                                 # the group_size samples of prompt i the step trains on
    feed.grow.summary()                          # an AdaptiveSummary; rates.observe(feed.grow.counts) learns

GRPO learns nothing from a group whose rewards are all equal (advantage 0). On a hard prompt (success rate
p = 0.5%), a group of 8 is almost always all wrong, while 64 samples hold a right answer 27% of the time and
256 samples 72%. A prompt starts with ``group_size`` samples; when its group ends, ``spec.judge.spread`` judges
it (the caller scores it, as dynamic sampling does); a group with no spread is **stalled** and may be extended:
more samples of the same prompt, sample indices continuing (sample j keeps the stream (seed, i, j, t), so a
completion does not depend on when or whether the prompt was extended), queued when slots free up, beside the
other prompts' samples (no round barrier). A group stops growing when it has a spread (**rescued** if it had
none at ``group_size``), when it holds ``max_samples_per_prompt`` samples, or when the step's
``max_samples_per_step`` samples (every sample decoded, the first ``group_size`` of each prompt included) are
spent. The prompt's K/V are not kept between its group's end and its extension: the extension prefills the
prompt again (batched with the other prompts admitted with it), a prompt's length in prefill tokens per
extension, against ``extend_by`` completions decoded.

Growth is a component of a feed (its ``grow``: :class:`Extensions`), not a kind of feed: the fixed batch grows
its stalled groups and trains on every prompt; draw-and-judge (dynamic sampling) grows them first and drops one
still without spread when it cannot grow, its place going to a new prompt.

Who gets the next samples (``rule``), asked each time free slots would otherwise wait:

- ``uniform``: the stalled groups in the order they stalled (a group extended and stalled again goes last).
- ``value``: the stalled group with the largest expected rescue per decoded token,
  ``v_i = P_i(k) / (k * L_i)``, with ``k`` the samples the extension adds, ``L_i`` the mean length of the
  group's finished samples (the best estimate of its cost we have: the same prompt, the current policy) and
  ``P_i(k)`` the chance that ``k`` more samples contain one whose reward differs, after ``n_i`` that all agree,
  under a Beta prior: the rescue rate observed so far for groups stalled at the same reward level
  (``judge.level``; :mod:`infgrpo.sampler.engine.rescue_rates`). It spends the budget where a rescue is likeliest
  per token: short prompts before long ones, groups stalled few times before groups stalled often, and reward
  levels that get rescued before levels that never do.
- ``value_or_draw`` (with dynamic sampling): ``value``, and a stalled group is given up (dropped, its place
  going to a new prompt) when its ``v_i`` is below a fresh draw's (the feed's :meth:`Feed.draw_value
  <infgrpo.sampler.engine.feed.Feed.draw_value>`): the next samples go to the likelier gradient per token, an
  extension or a new prompt. Without a prompt to draw (no dynamic sampling, the source or ``max_prompts``
  spent, the budget short of a group) it is ``value``.

The update trains on ``group_size`` samples of every prompt (:meth:`Extensions.rows`): all of them when the group
did not grow, else ``judge.select``'s choice (the caller's PODS rule: the subset of largest reward variance).

The spec and the :class:`~infgrpo.sampler.engine.plan.Judge` protocol are pure data in
:mod:`infgrpo.sampler.engine.plan`, the counts (:class:`~infgrpo.sampler.engine.summaries.AdaptiveSummary`) in
:mod:`infgrpo.sampler.engine.summaries`; :class:`GrowingFeed` says what growth asks of a feed, so this module
imports none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from infgrpo.sampler.engine.plan import AdaptiveSpec
from infgrpo.sampler.engine.rescue_rates import RescueRates, rescue_chance
from infgrpo.sampler.engine.summaries import AdaptiveSummary
from infgrpo.sampler.schedule.sequence import Sequence
from infgrpo.settings import ConfigError

if TYPE_CHECKING:
    from infgrpo.sampler.schedule.scheduler import Scheduler


def check_prompt_cap(max_samples_per_prompt: int, group_size: int) -> None:
    """A ConfigError when a prompt's cap cannot hold its first group (``adaptive_groups.max_samples_per_prompt``)."""
    if max_samples_per_prompt < group_size:
        raise ConfigError(
            f"adaptive_groups.max_samples_per_prompt={max_samples_per_prompt} is below group_size={group_size}: a "
            "prompt starts with group_size samples"
        )


def check_grow_scheme(scheme: str) -> None:
    """A ConfigError unless dynamic sampling's ``scheme`` lets groups grow: ``continuous`` (``rounds`` decodes
    whole batches in turn)."""
    if scheme != "continuous":
        raise ConfigError(
            "adaptive_groups.enabled with dynamic_sampling needs dynamic_sampling.scheme='continuous' (groups grow "
            f"inside the continuous scheme, while prompts are drawn); got {scheme!r}"
        )


class GrowingFeed(Protocol):
    """What :class:`Extensions` asks of the feed whose groups grow (a :class:`~infgrpo.sampler.engine.feed.Feed`)."""

    group_size: int
    groups: list[list[Sequence]]
    sched: Scheduler | None

    def add_samples(self, i: int, k: int) -> list[Sequence]:
        """``k`` more samples of prompt ``i`` (not queued)."""

    def given_up(self, i: int) -> None:
        """Prompt ``i``'s stalled group will not grow."""

    def draw_value(self) -> float | None:
        """What a fresh prompt is worth now (informative groups per decoded token), or None when none can be drawn."""


class Extensions:
    """The growth of one rollout's stalled groups: the stalled groups, the budget, the rule, the counters.

    A feed holds one as its ``grow`` (it calls :meth:`attach` with itself), calls :meth:`ended` when a group ends
    (True: stalled and waiting to grow), :meth:`top_up` at admission (queues extensions while free slots would
    otherwise wait) and :meth:`rows` at the end. It answers ``given_up(i)`` (a stalled group that will not grow)
    and ``draw_value()`` (what a fresh prompt is worth, for ``value_or_draw``). ``rates`` are read, never
    written: the sampler observes ``counts`` once the rollout is over.
    """

    def __init__(self, spec: AdaptiveSpec, rates: RescueRates | None = None) -> None:
        self.spec = spec
        self.rates = rates if rates is not None else RescueRates()
        self.feed: GrowingFeed | None = None
        self.extend_by = spec.extend_by
        self.stalled: list[int] = []  # groups waiting for an extension, in stall order
        self.spread: dict[int, bool] = {}  # each ended group's last judgement
        self.stalled_at_g: set[int] = set()  # groups without spread at group_size
        self.extensions: dict[int, int] = {}  # prompt -> extensions queued
        self.pending: dict[int, int] = {}  # prompt -> samples of its running extension (its judgement counts them)
        self.counts: dict[str, tuple[int, int]] = {}  # level -> (extension samples drawn, extensions that found)

    def attach(self, feed: GrowingFeed) -> None:
        """The feed whose groups grow; a ConfigError when a prompt's cap cannot hold its first group."""
        check_prompt_cap(self.spec.max_samples_per_prompt, feed.group_size)
        self.feed, self.extend_by = feed, self.spec.extend_by or feed.group_size

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
        spread = bool(self.spec.judge.spread(i, self.feed.groups[i]))
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
            self.feed.given_up(i)

    def top_up(self) -> None:
        """Queues extensions by the rule while free slots would otherwise wait."""
        sched = self.feed.sched
        while self.stalled and sched.wants_work():
            self.prune()
            if not self.stalled:
                return
            i = self.pick()
            self.stalled.remove(i)
            if self.drawing_beats(i):
                self.feed.given_up(i)
                continue
            k = min(self.extend_by, self.room(i))
            new = self.feed.add_samples(i, k)
            self.extensions[i] = self.extensions.get(i, 0) + 1
            self.pending[i] = k
            sched.queue(new)

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
        if self.spec.rule != "value_or_draw":
            return False
        fresh = self.feed.draw_value()
        return fresh is not None and self.value(i) < fresh

    def level_key(self, i: int) -> str:
        """The reward level prompt ``i`` stalled at (the prior's key)."""
        return str(self.spec.judge.level(i))

    def rows(self, i: int) -> list[Sequence]:
        """The ``group_size`` samples of prompt ``i`` the step trains on (ascending sample index)."""
        group, g = self.feed.groups[i], self.feed.group_size
        ended = [s for s in group if s.finish_reason is not None]
        if len(group) == g:
            return group
        if len(ended) < g:  # cancelled mid-extension: the first group_size ended samples are at least g
            ended = group[:g]
        picked = sorted(self.spec.judge.select(i, ended, g)) if self.spread.get(i) else list(range(g))
        return [ended[j] for j in picked]

    # -- what the rollout found -----------------------------------------------------------------
    def summary(self) -> AdaptiveSummary:
        """Samples per prompt, stalled, extended and rescued groups, extension samples and tokens, the budget used,
        cancelled samples (a pure read: call it as often as you like)."""
        feed, g = self.feed, self.feed.group_size
        sizes = [len(group) for group in feed.groups]
        extra = [s for group in feed.groups for s in group[g:]]
        cancelled = [s for group in feed.groups for s in group if s.finish_reason is None]
        return AdaptiveSummary(
            samples_per_prompt_mean=sum(sizes) / max(len(sizes), 1),
            samples_per_prompt_max=max(sizes, default=0),
            groups_stalled=len(self.stalled_at_g),
            groups_extended=len(self.extensions),
            groups_rescued=sum(1 for i in self.stalled_at_g if self.spread.get(i)),
            extension_samples=len(extra),
            extension_tokens=sum(len(s) for s in extra),
            budget_used=sum(sizes) / self.spec.max_samples_per_step,
            cancelled_samples=len(cancelled),
            cancelled_tokens=sum(len(s) for s in cancelled),
        )
