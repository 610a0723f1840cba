"""GRPO math as pure tensor functions behind small name registries."""

from infgrpo.algo.advantages import ADVANTAGES, grpo_advantages, zero_std_fraction
from infgrpo.algo.entropy import AdaptiveEntropyCoef, entropy_from_logits, entropy_threshold, high_entropy_mask
from infgrpo.algo.importance import log_importance_weights, off_policy_mask
from infgrpo.algo.kl import KL_ESTIMATORS
from infgrpo.algo.losses import NORMALIZERS, LossNorm
from infgrpo.algo.objective import Objective
from infgrpo.algo.objective_loss import ObjectiveOutput, objective_loss, reduce_means
from infgrpo.algo.policy_terms import POLICY_TERMS, gamma_weights
from infgrpo.algo.rollout_correction import (
    combine_mismatch,
    mismatch_metrics,
    mismatch_sums,
    rollout_correction_weights,
)

__all__ = [
    "ADVANTAGES",
    "KL_ESTIMATORS",
    "NORMALIZERS",
    "POLICY_TERMS",
    "AdaptiveEntropyCoef",
    "LossNorm",
    "Objective",
    "ObjectiveOutput",
    "combine_mismatch",
    "entropy_from_logits",
    "entropy_threshold",
    "gamma_weights",
    "grpo_advantages",
    "high_entropy_mask",
    "log_importance_weights",
    "mismatch_metrics",
    "mismatch_sums",
    "objective_loss",
    "off_policy_mask",
    "reduce_means",
    "rollout_correction_weights",
    "zero_std_fraction",
]
