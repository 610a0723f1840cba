"""The loss normalizations: a micro-batch's per-token loss summed into its share of the batch loss.

Per loss type (shapes (N, T): N sequences, T completion positions; ``mask`` 1 on real tokens), with
batch-wide counts in :class:`LossNorm` so that the sum of the losses of any split of the batch into
micro-batches equals the loss of the whole batch:

- ``grpo`` (and ``sapo``):   mean over sequences of each sequence's token mean (TRL ``grpo``);
- ``bnpo``, ``dapo`` (and ``cispo``, ``vespo``): sum over tokens / active tokens of the batch (TRL ``dapo``);
- ``dr_grpo``: sum over tokens / (sequences x max_completion_length) (TRL ``dr_grpo``);
- ``luspo``:   each sequence's token sum, averaged over sequences.

TRL divides ``bnpo`` by the tokens of each *local* micro-batch; here one optimization step covers
the whole rollout, so ``bnpo`` and ``dapo`` coincide and micro-batching changes nothing. The per-token
terms are :mod:`infgrpo.algo.policy_terms`; :func:`~infgrpo.algo.objective_loss.objective_loss` puts
them together.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infgrpo.registry import Registry

NORMALIZERS = Registry("loss_type")


@dataclass(frozen=True)
class LossNorm:
    """Counts over the *whole* optimization batch, used to normalize each micro-batch's loss."""

    num_sequences: int
    num_tokens: int
    max_completion_length: int
    num_bonus_tokens: int | None = None
    """Tokens the entropy bonus averages over (completion tokens the entropy mask keeps); None: ``num_tokens``."""


@NORMALIZERS.register("grpo")
@NORMALIZERS.register("sapo")
def aggregate_grpo(per_token: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """``grpo``: each sequence's token mean, summed and divided by the batch's ``norm.num_sequences``."""
    seq_mean = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # (N,)
    return seq_mean.sum() / norm.num_sequences


@NORMALIZERS.register("bnpo")
@NORMALIZERS.register("dapo")
@NORMALIZERS.register("cispo")
@NORMALIZERS.register("vespo")
def aggregate_tokens(per_token: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """``bnpo`` / ``dapo``: sum over active tokens divided by the batch's ``norm.num_tokens``."""
    return (per_token * mask).sum() / max(norm.num_tokens, 1)


@NORMALIZERS.register("dr_grpo")
def aggregate_dr_grpo(per_token: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """``dr_grpo``: sum over active tokens divided by ``num_sequences x max_completion_length``."""
    return (per_token * mask).sum() / (norm.num_sequences * norm.max_completion_length)


@NORMALIZERS.register("luspo")
def aggregate_luspo(per_token: torch.Tensor, mask: torch.Tensor, norm: LossNorm) -> torch.Tensor:
    """``luspo``: each sequence's token sum (its GSPO loss times its length), divided by ``norm.num_sequences``."""
    return (per_token * mask).sum() / norm.num_sequences
