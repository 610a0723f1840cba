"""Rollout decoding: token ids and an HF causal LM in, :class:`Rollouts` out. No Lightning here."""

from infgrpo.sampler.config import SamplerConfig
from infgrpo.sampler.rollouts import Rollouts
from infgrpo.sampler.sampler import MicroGroupSampler

__all__ = ["MicroGroupSampler", "Rollouts", "SamplerConfig"]
