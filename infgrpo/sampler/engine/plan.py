"""What a rollout is asked to decode: the plan a feed is made from, the specs of dynamic sampling and adaptive groups.

    spec = DynamicSpec(target_groups=4, max_prompts=16, keep=judge)         # judge(i, group) -> informative?
    grow = AdaptiveSpec(judge, max_samples_per_prompt=64, max_samples_per_step=256)
    plan = FeedPlan(8, 0, source=Replay(it), dynamic=spec, max_prompt_len=96, adaptive=grow)
    feed = make_feed(plan, looks, rates)                                    # infgrpo.sampler.feeds

Pure data, and the caller's :class:`Judge` protocol: the feeds (:mod:`infgrpo.sampler.engine.feed`,
:mod:`~infgrpo.sampler.engine.dynamic`, :mod:`~infgrpo.sampler.engine.adaptive`) read these, and nothing here
imports a feed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

from infgrpo.sampler.schedule.sequence import Sequence
from infgrpo.vision.inputs import VisionInputs

Scheme = Literal["continuous", "rounds"]
Rule = Literal["uniform", "value", "value_or_draw"]


@dataclass
class FeedPlan:
    """One rollout's work: ``prompts`` (a fixed batch) or ``source`` under ``dynamic`` (drawn as slots free up)."""

    group_size: int
    seed: int
    prompt_offset: int = 0
    """The global index of the first prompt (sample j of the i-th prompt draws from (seed, prompt_offset + i, j))."""
    prompts: list[list[int]] | None = None
    """The fixed batch's prompts (token ids)."""
    source: Replay | None = None
    """Dynamic sampling: the prompts to draw from (read again from its start by a retry)."""
    dynamic: DynamicSpec | None = None
    """Dynamic sampling: the target, the cap, the judge and the scheme."""
    max_prompt_len: int = 0
    """Dynamic sampling: the longest prompt ``source`` may yield."""
    adaptive: AdaptiveSpec | None = None
    """Adaptive groups: stalled groups grow (not with the ``rounds`` scheme)."""
    vision: list[VisionInputs | None] | None = None
    """Each prompt's images (a vision-language model; None: text prompts): the fixed batch's, one entry per prompt,
    or dynamic sampling's by draw position, appended to as ``source`` yields each prompt."""
    sample_prompts: list[list[list[int]]] | None = None
    """A fixed batch whose samples of one row may decode different prompts: ``sample_prompts[i][j]``, sample j of
    row i's (:mod:`~infgrpo.sampler.engine.per_sample`); None: every sample decodes its row's ``prompts[i]``."""


@dataclass
class DynamicSpec:
    """What a dynamic rollout must find, and how it judges a group."""

    target_groups: int
    """Informative groups the step needs (its batch size)."""
    max_prompts: int
    """Most prompts drawn in one rollout (>= ``target_groups``)."""
    keep: Callable[[int, list[Sequence]], bool]
    """``keep(position, group)``: whether the finished group of the ``position``-th prompt drawn is informative."""
    informative_rate: float = 0.5
    """The expected share of informative groups, for admission (the sampler learns it across steps)."""
    scheme: Scheme = "continuous"
    round_size: int = 0
    """Prompts a round (``rounds``; default: ``target_groups``)."""


class Replay:
    """A prompt source that can be read again from its start: an out-of-memory retry of a dynamic rollout draws the
    same prompts in the same order, then goes on with the source."""

    def __init__(self, source: Iterator[list[int]]) -> None:
        self.source, self.seen = source, []

    def rewind(self) -> Iterator[list[int]]:
        """An iterator over the prompts drawn so far, then the source's next ones (recorded as they come)."""
        yield from list(self.seen)
        for prompt in self.source:
            self.seen.append(prompt)
            yield prompt


class Judge(Protocol):
    """The caller's judge of ended groups: it scores them (the engine knows no rewards)."""

    def spread(self, i: int, group: list[Sequence]) -> bool:
        """Whether the ended samples of prompt ``i`` (every one so far, in sample order) have a reward spread."""

    def level(self, i: int) -> Hashable:
        """The reward level prompt ``i`` stalled at (the key of its rescue prior)."""

    def select(self, i: int, group: list[Sequence], m: int) -> list[int]:
        """The ``m`` samples (indices into ``group``) of a grown group with a spread that the step trains on."""


@dataclass
class AdaptiveSpec:
    """How adaptive groups grow, and who judges them (see the module docstring)."""

    judge: Judge
    """Says whether an ended group has a spread, the level it stalled at, and which samples of a grown group train."""
    max_samples_per_prompt: int
    """Most samples of one prompt (>= the group size)."""
    max_samples_per_step: int
    """Most samples decoded in the rollout, the first samples of every prompt included."""
    rule: Rule = "value"
    extend_by: int = 0
    """Samples an extension adds (0: the group size)."""

    def max_sequences(self, prompts: int) -> int:
        """The most sequences a rollout of at most ``prompts`` prompts can hold."""
        return min(prompts * self.max_samples_per_prompt, self.max_samples_per_step)
