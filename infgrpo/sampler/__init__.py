"""Rollout decoding: token ids and an HF causal LM in, :class:`Rollouts` out. No Lightning here, no rewards.

Three rooms and a facade; imports run facade -> {engine, hf} -> schedule:

- the facade: ``sampler.py`` (:class:`MicroGroupSampler`: length prediction, the engine or a baseline, the
  out-of-memory back-off), ``feeds.py`` (which feed a rollout gets), ``config.py`` (:class:`SamplerConfig`),
  ``pool_sizing.py`` (``num_slots: auto``), ``rollouts.py`` (:class:`Rollouts`, what every decoder returns) and
  ``model_support.py`` (which models the engine runs, stop tokens, K/V bytes), the last two shared by the rooms;
- ``engine/``: the device side -- the one decode loop and its feeds, the slot pool, the static decode step;
- ``schedule/``: the host side -- scheduler, refill policies, planner, length predictor, trace simulator;
- ``hf/``: the Hugging Face baselines.
"""

from infgrpo.sampler.config import SamplerConfig
from infgrpo.sampler.engine.plan import AdaptiveSpec, DynamicSpec
from infgrpo.sampler.engine.summaries import AdaptiveSummary, DynamicSummary
from infgrpo.sampler.rollouts import Rollouts
from infgrpo.sampler.sampler import MicroGroupSampler

__all__ = [
    "AdaptiveSpec",
    "AdaptiveSummary",
    "DynamicSpec",
    "DynamicSummary",
    "MicroGroupSampler",
    "Rollouts",
    "SamplerConfig",
]
