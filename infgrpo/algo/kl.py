"""Per-token estimators of KL(pi || pi_ref) from log-probs of the sampled tokens.

With ``d = ref_logp - logp`` (both (N, T)):
- ``k1``: ``-d``                   (unbiased, high variance, can be negative)
- ``k2``: ``d**2 / 2``
- ``k3``: ``exp(d) - d - 1``       (unbiased, always >= 0; Schulman's estimator, TRL's)
"""

from __future__ import annotations

import torch

from infgrpo.registry import Registry

KL_ESTIMATORS = Registry("kl_estimator")


@KL_ESTIMATORS.register("k1")
def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``logp - ref_logp`` (N, T): unbiased, high variance, can be negative."""
    return logp - ref_logp


@KL_ESTIMATORS.register("k2")
def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``(ref_logp - logp) ** 2 / 2`` (N, T): always >= 0, biased, low variance."""
    return 0.5 * (ref_logp - logp) ** 2


@KL_ESTIMATORS.register("k3")
def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``exp(d) - d - 1`` with ``d = ref_logp - logp`` (N, T): unbiased, always >= 0 (Schulman's, TRL's)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0
