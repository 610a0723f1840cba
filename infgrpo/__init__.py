"""infgrpo: GRPO training on one GPU with group sizes that cost no memory.

Implements the system of *Infinite Sampling* (arXiv 2506.22950) on PyTorch Lightning. ``GRPOModule``'s
settings come in groups, one dataclass each (``model.<group>.<field>`` in YAML and on the command line).
"""

from infgrpo.algo import Objective
from infgrpo.evaluation import EvaluationConfig
from infgrpo.module import GRPOModule
from infgrpo.policy.config import LoRAConfig, PolicyConfig, QuantizationConfig
from infgrpo.rewards.config import RewardConfig
from infgrpo.sampler import MicroGroupSampler, Rollouts, SamplerConfig
from infgrpo.training.hparams import LoggingConfig
from infgrpo.training.optim import OptimizerConfig
from infgrpo.update.config import UpdateConfig

__all__ = [
    "EvaluationConfig",
    "GRPOModule",
    "LoRAConfig",
    "LoggingConfig",
    "MicroGroupSampler",
    "Objective",
    "OptimizerConfig",
    "PolicyConfig",
    "QuantizationConfig",
    "RewardConfig",
    "Rollouts",
    "SamplerConfig",
    "UpdateConfig",
]
__version__ = "0.2.0"
