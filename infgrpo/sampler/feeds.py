"""What a rollout decodes, and the one place its feed is chosen: a fixed batch or a draw, growing groups or not.

    plan = FeedPlan(group_size=8, seed=0, prompts=prompt_ids)                             # sample()
    plan = FeedPlan(8, 0, source=Replay(it), dynamic=spec, max_prompt_len=96, adaptive=grow)  # sample_dynamic()
    feed = make_feed(plan, looks, rates)         # a new feed for each attempt: an out-of-memory retry starts over

The plan is :class:`~infgrpo.sampler.engine.plan.FeedPlan`. The feeds (:mod:`infgrpo.sampler.engine.feed`) are
:class:`~infgrpo.sampler.engine.feed.FixedBatch` (these prompts x G),
:class:`~infgrpo.sampler.engine.per_sample.PerSampleBatch` (a fixed batch whose samples of a row may decode different
prompts),
:class:`~infgrpo.sampler.engine.dynamic.DrawAndJudge` (dynamic sampling, ``continuous``) and
:class:`~infgrpo.sampler.engine.dynamic.Rounds` (verl's ``rounds``); adaptive groups are a component of the first
two (``grow``: :class:`~infgrpo.sampler.engine.adaptive.Extensions`), not a kind of feed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infgrpo.sampler.engine.adaptive import Extensions
from infgrpo.sampler.engine.dynamic import DrawAndJudge, Rounds
from infgrpo.sampler.engine.feed import Feed, FixedBatch
from infgrpo.sampler.engine.per_sample import PerSampleBatch
from infgrpo.sampler.engine.rescue_rates import RescueRates

if TYPE_CHECKING:
    from infgrpo.sampler.engine.plan import FeedPlan
    from infgrpo.sampler.schedule.length_predictor import Looks


def make_feed(plan: FeedPlan, looks: Looks | None, rates: RescueRates) -> Feed:
    """A new feed for ``plan``; ``looks`` predicts completion lengths (the length-aware refill policies order by
    them), ``rates`` are the rescue rates learned over earlier rollouts (adaptive groups' prior, read only)."""
    grow = Extensions(plan.adaptive, rates) if plan.adaptive is not None else None
    if plan.sample_prompts is not None:  # samples of one row with different prompts: no growing, no draws
        predicted = looks.all(plan.prompts) if looks is not None else None  # each row's first prompt
        return PerSampleBatch(plan.sample_prompts, plan.seed, predicted, plan.prompt_offset)
    if plan.dynamic is None:
        predicted = looks.all(plan.prompts) if looks is not None else None  # the whole batch in one look
        return FixedBatch(plan.prompts, plan.group_size, plan.seed, predicted, plan.prompt_offset, grow)
    predict = looks.one if looks is not None else None  # each prompt as it is drawn
    feed = Rounds if plan.dynamic.scheme == "rounds" else DrawAndJudge
    return feed(plan, predict, grow)
