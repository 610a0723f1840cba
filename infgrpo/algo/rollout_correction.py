"""The rollout's log-probs vs the training forward's: the mismatch statistics and TRL's correction weights.

The sampler and the training forward run the same weights through different kernels (a decode step
over a KV pool vs a full forward), so a token's behaviour log-prob ``b`` (from the rollout) and its
policy log-prob ``p`` (from the update's first forward, before any optimizer step) differ slightly
(~4e-5 in float32 on a CPU; more in bfloat16). Shapes: N sequences, T completion positions, ``mask``
(N, T) 1 on completion tokens.

- :func:`mismatch_sums`: additive statistics of ``|p - b|`` and of the ratio ``exp(p - b)`` over
  completion tokens (NaN log-probs, tokens the rollout could not score, are left out), reduced over
  micro-batches and ranks by :func:`combine_mismatch` and read by :func:`mismatch_metrics`.
- :func:`rollout_correction_weights`: TRL 1.16's ``vllm_importance_sampling_mode``
  (``GRPOTrainer._generate_and_score_completions``): ``d = (p - b) * mask`` (NaN -> 0), summed over the
  sequence for the ``sequence_*`` modes; ``r = exp(d)``; ``*_truncate``: ``clamp(r, C_min, C_max)``;
  ``*_mask``: 0 where ``r < C_min`` or ``r > C_max`` (a missing bound is no bound). The weight multiplies
  the policy term of every token (of every token of the sequence), not the KL term; VESPO folds it into
  its sequence weight instead. Per token or per sequence, so micro-batching changes nothing.
"""

from __future__ import annotations

import math

import torch

from infgrpo.algo.objective import RolloutCorrection
from infgrpo.registry import check_choice, choices
from infgrpo.runtime.ranks import Ranks

CORRECTION_MODES = tuple(m for m in choices(RolloutCorrection) if m != "none")
MISMATCH_FIELDS = ("abs_diff_sum", "ratio_sum", "tokens", "abs_diff_max")


@torch.no_grad()
def rollout_correction_weights(
    policy_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    clip_min: float | None,
    clip_max: float | None,
) -> torch.Tensor:
    """Correction weights: (N, T) for ``token_*`` modes, (N, 1) for ``sequence_*`` modes (no gradient).

    ``policy_logp`` (N, T): the training forward's log-probs of the rollout's weights (the frozen copy, or
    the first iteration's detached log-probs); ``behaviour_logp`` (N, T): the rollout's; ``mask`` (N, T).
    """
    check_choice("rollout_correction", mode, CORRECTION_MODES)
    diff = torch.nan_to_num((policy_logp - behaviour_logp) * mask, nan=0.0)  # (N, T)
    if mode.startswith("sequence_"):
        diff = diff.sum(-1, keepdim=True)  # (N, 1): log of the sequence's ratio
    ratio = torch.exp(diff)
    if mode.endswith("_truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    lo = -math.inf if clip_min is None else clip_min
    hi = math.inf if clip_max is None else clip_max
    return ratio.masked_fill((ratio < lo) | (ratio > hi), 0.0)


@torch.no_grad()
def mismatch_sums(policy_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(4,) float64: sum of ``|p - b|``, sum of ``exp(p - b)``, token count, max ``|p - b|`` (``MISMATCH_FIELDS``).

    Over completion tokens (``mask`` (N, T)) whose two log-probs are both finite numbers (not NaN).
    """
    diff = (policy_logp - behaviour_logp).double()  # (N, T)
    keep = mask.bool() & ~diff.isnan()
    d = torch.where(keep, diff, 0.0)  # masked, not indexed: no host synchronization
    top = d.abs().amax() if d.numel() else d.new_zeros(())
    return torch.stack([d.abs().sum(), torch.where(keep, diff.exp(), 0.0).sum(), keep.sum().double(), top])


def combine_mismatch(sums: list[torch.Tensor], ranks: Ranks = Ranks()) -> torch.Tensor:  # noqa: B008 - frozen
    """The (4,) statistics of several micro-batches on every rank: sums added, maxima taken."""
    stacked = torch.stack(sums)  # (k, 4)
    local = torch.cat([stacked[:, :3].sum(0), stacked[:, 3:].amax(0)])
    return torch.cat([ranks.sum(local[:3]), ranks.max(local[3:])])


def mismatch_metrics(sums: torch.Tensor) -> dict[str, float]:
    """``logprob_mismatch_mean`` / ``_max`` (nats) and ``ratio_mean`` (of ``exp(p - b)``) from combined statistics."""
    abs_sum, ratio_sum, tokens, top = sums.tolist()
    n = max(tokens, 1.0)
    return {"logprob_mismatch_mean": abs_sum / n, "logprob_mismatch_max": top, "ratio_mean": ratio_sum / n}
