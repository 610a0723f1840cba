"""infgrpo: GRPO training on one GPU with group sizes that cost no memory.

Implements the system of *Infinite Sampling* (arXiv 2506.22950) on PyTorch Lightning. ``GRPOModule``'s
settings come in groups, one dataclass each (``model.<group>.<field>`` in YAML and on the command line).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names load when first used (below): `import infgrpo.sampler` needs no Lightning
    from infgrpo.agent import AgentConfig
    from infgrpo.algo import Objective
    from infgrpo.evaluation import EvaluationConfig
    from infgrpo.module import GRPOModule
    from infgrpo.policy.config import LoRAConfig, PolicyConfig, QuantizationConfig
    from infgrpo.rewards.config import RewardConfig
    from infgrpo.sampler import MicroGroupSampler, Rollouts, SamplerConfig
    from infgrpo.settings import InfgrpoWarning
    from infgrpo.trainer.fsdp2 import FSDP2Strategy
    from infgrpo.training.adaptive import AdaptiveGroupsConfig
    from infgrpo.training.dynamic import DynamicSamplingConfig
    from infgrpo.training.hparams import LoggingConfig
    from infgrpo.training.optim import OptimizerConfig
    from infgrpo.update.config import UpdateConfig

HOMES = {
    "AgentConfig": "infgrpo.agent",
    "AdaptiveGroupsConfig": "infgrpo.training.adaptive",
    "DynamicSamplingConfig": "infgrpo.training.dynamic",
    "Objective": "infgrpo.algo",
    "EvaluationConfig": "infgrpo.evaluation",
    "FSDP2Strategy": "infgrpo.trainer.fsdp2",
    "GRPOModule": "infgrpo.module",
    "InfgrpoWarning": "infgrpo.settings",
    "LoRAConfig": "infgrpo.policy.config",
    "PolicyConfig": "infgrpo.policy.config",
    "QuantizationConfig": "infgrpo.policy.config",
    "RewardConfig": "infgrpo.rewards.config",
    "MicroGroupSampler": "infgrpo.sampler",
    "Rollouts": "infgrpo.sampler",
    "SamplerConfig": "infgrpo.sampler",
    "LoggingConfig": "infgrpo.training.hparams",
    "OptimizerConfig": "infgrpo.training.optim",
    "UpdateConfig": "infgrpo.update.config",
}
"""Where each public name lives: ``from infgrpo import GRPOModule`` imports its module on first use, so a
process that needs only a part (a benchmark's rollout child, the sampler) does not load Lightning."""


def __getattr__(name: str) -> Any:
    if name in HOMES:
        value = getattr(importlib.import_module(HOMES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'infgrpo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *HOMES])


__all__ = [
    "AdaptiveGroupsConfig",
    "AgentConfig",
    "DynamicSamplingConfig",
    "FSDP2Strategy",
    "EvaluationConfig",
    "GRPOModule",
    "InfgrpoWarning",
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
__version__ = "0.4.0.dev0"  # pyproject.toml's version: unreleased work after 0.3.0
