"""The GRPO policy loss: a clipped surrogate per token, aggregated by a named normalization.

Per token (shapes (N, T): N sequences, T completion positions; ``mask`` 1 on real tokens)::

    ratio = exp(logp - old_logp)
    loss  = -min(ratio * A, clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * A)
          + beta * kl(logp, ref_logp)                # k3 by default, as in TRL
          (x ratio with kl_bias_correction: the importance-sampling correction of DeepSeek-V3.2, TRL's
           use_bias_correction_kl, on by default in TRL 1.16 and in GRPOModule)

Aggregation (``loss_type``), with batch-wide counts in :class:`LossNorm` so that the sum of the
losses of any split of the batch into micro-batches equals the loss of the whole batch:

- ``grpo``:    mean over sequences of each sequence's token mean (TRL ``grpo``);
- ``bnpo``:    sum over tokens / active tokens of the optimization batch;
- ``dapo``:    sum over tokens / active tokens of the whole generation batch (TRL ``dapo``);
- ``dr_grpo``: sum over tokens / (sequences x max_completion_length) (TRL ``dr_grpo``).

TRL divides ``bnpo`` by the tokens of each *local* micro-batch; here one optimization step covers
the whole rollout, so ``bnpo`` and ``dapo`` coincide and micro-batching changes nothing.

:data:`LOSS_TYPES` holds the four names the clipped surrogate above is aggregated by (what
``accumulate_policy_gradients`` runs today). :data:`NORMALIZERS` holds every loss type of
:class:`~infgrpo.algo.Objective` (TRL 1.16 ``GRPOTrainer._compute_loss``): ``sapo`` is normalized as
``grpo``, ``cispo`` and ``vespo`` as ``dapo``, and ``luspo`` by :func:`aggregate_luspo` (each sequence's
token sum, averaged over sequences).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infgrpo.algo.kl import KL_ESTIMATORS
from infgrpo.registry import Registry

LOSS_TYPES = Registry("loss_type")
NORMALIZERS = Registry("loss_type")


@dataclass(frozen=True)
class LossNorm:
    """Counts over the *whole* optimization batch, used to normalize each micro-batch's loss."""

    num_sequences: int
    num_tokens: int
    max_completion_length: int
    num_bonus_tokens: int | None = None
    """Tokens the entropy bonus averages over (completion tokens the entropy mask keeps); None: ``num_tokens``."""


@dataclass
class SurrogateTerms:
    """Per-token pieces of the loss, each (N, T); ``kl`` is None when ``beta == 0``."""

    loss: torch.Tensor
    kl: torch.Tensor | None
    low_clipped: torch.Tensor
    high_clipped: torch.Tensor


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    kl_estimator: str = "k3",
    kl_bias_correction: bool = False,
) -> SurrogateTerms:
    """Per-token clipped surrogate loss. ``logp``/``old_logp``/``ref_logp`` (N, T), ``advantages`` (N,).

    ``kl_bias_correction`` multiplies the KL estimate by the (unclipped, differentiable) ratio: TRL's
    ``use_bias_correction_kl``, which TRL 1.16 turns on by default (``grpo_config.py``), as does
    :class:`~infgrpo.GRPOModule`; this pure function leaves it off unless asked. The ratio is 1 on-policy
    but its gradient is not 0, so the correction changes the KL gradient whenever ``beta != 0`` (it adds
    ``kl * dlogp``: the unbiased gradient of the reverse KL, DeepSeek-V3.2).
    """
    ratio = torch.exp(logp - old_logp)  # (N, T)
    clipped = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high)
    adv = advantages.unsqueeze(1)  # (N, 1)
    loss = -torch.min(ratio * adv, clipped * adv)
    kl = None
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta != 0 needs reference log-probs (ref_logp)")
        kl = KL_ESTIMATORS.get(kl_estimator)(logp, ref_logp)
        if kl_bias_correction:
            kl = kl * ratio
        loss = loss + beta * kl
    low = (ratio < 1.0 - epsilon_low) & (adv < 0)
    high = (ratio > 1.0 + epsilon_high) & (adv > 0)
    return SurrogateTerms(loss, kl, low, high)


@NORMALIZERS.register("grpo")
@NORMALIZERS.register("sapo")
@LOSS_TYPES.register("grpo")
def aggregate_grpo(per_token: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """``grpo``: each sequence's token mean, summed and divided by the batch's ``norm.num_sequences``."""
    seq_mean = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # (N,)
    return seq_mean.sum() / norm.num_sequences


@NORMALIZERS.register("bnpo")
@NORMALIZERS.register("dapo")
@NORMALIZERS.register("cispo")
@NORMALIZERS.register("vespo")
@LOSS_TYPES.register("bnpo")
@LOSS_TYPES.register("dapo")
def aggregate_tokens(per_token: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """``bnpo`` / ``dapo``: sum over active tokens divided by the batch's ``norm.num_tokens``."""
    return (per_token * mask).sum() / max(norm.num_tokens, 1)


@NORMALIZERS.register("dr_grpo")
@LOSS_TYPES.register("dr_grpo")
def aggregate_dr_grpo(per_token: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """``dr_grpo``: sum over active tokens divided by ``num_sequences x max_completion_length``."""
    return (per_token * mask).sum() / (norm.num_sequences * norm.max_completion_length)


@NORMALIZERS.register("luspo")
def aggregate_luspo(per_token: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """``luspo``: each sequence's token sum (its GSPO loss times its length), divided by ``norm.num_sequences``."""
    return (per_token * mask).sum() / norm.num_sequences


def policy_loss(loss_type: str, per_token: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """Scalar loss of one (micro-)batch: ``per_token`` and ``mask`` (N, T), float mask."""
    return LOSS_TYPES.get(loss_type)(per_token, mask.to(per_token.dtype), norm)
