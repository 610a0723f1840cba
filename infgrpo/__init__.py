"""infgrpo: GRPO training on one GPU with group sizes that cost no memory.

Implements the system of *Infinite Sampling* (arXiv 2506.22950) on PyTorch Lightning.
"""

from infgrpo.module import GRPOModule
from infgrpo.sampler import MicroGroupSampler, Rollouts, SamplerConfig

__all__ = ["GRPOModule", "MicroGroupSampler", "Rollouts", "SamplerConfig"]
__version__ = "0.1.0"
