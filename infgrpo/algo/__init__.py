"""GRPO math as pure tensor functions behind small name registries."""

from infgrpo.algo.advantages import ADVANTAGES, grpo_advantages, zero_std_fraction
from infgrpo.algo.kl import KL_ESTIMATORS
from infgrpo.algo.losses import LOSS_TYPES, LossNorm, clipped_surrogate, policy_loss

__all__ = [
    "ADVANTAGES",
    "KL_ESTIMATORS",
    "LOSS_TYPES",
    "LossNorm",
    "clipped_surrogate",
    "grpo_advantages",
    "policy_loss",
    "zero_std_fraction",
]
