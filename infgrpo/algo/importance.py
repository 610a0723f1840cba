"""Importance weights of the policy update (token level, or GSPO's sequence level) and the off-policy mask.

Shapes: N sequences, T completion positions; ``mask`` (N, T) is 1 on real completion tokens.

- :func:`log_importance_weights`: ``token`` keeps ``logp - old_logp`` (N, T); ``sequence`` (GSPO) takes
  its mean over each sequence's tokens, (N, 1), so one ratio ``exp(mean)`` scales every token of the
  sequence and its gradient spreads ``1 / |y|`` over them (TRL 1.16 ``GRPOTrainer._compute_loss``).
- :func:`off_policy_mask`: DeepSeek-V3.2's off-policy sequence masking (TRL
  ``GRPOTrainer.get_off_policy_mask``): keep a sequence if its advantage is >= 0 or if the mean of
  ``behaviour_logp - logp`` over its tokens (a KL estimate of how far the policy has moved from the one
  that sampled it) is at most the threshold. Both are per sequence, so any split of the batch into
  micro-batches gives the same values.
"""

from __future__ import annotations

import torch


def log_importance_weights(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """Log importance weights: (N, T) for ``level`` ``token``, (N, 1) for ``sequence`` (GSPO).

    ``logp`` (N, T) carries the gradient; ``old_logp`` (N, T) is the policy that sampled (or the frozen
    copy of the first iteration); ``mask`` (N, T) float. Padding positions are left out of the
    sequence mean (a sequence without tokens gets 0).
    """
    log_ratio = logp - old_logp  # (N, T)
    if level == "token":
        return log_ratio
    if level == "sequence":
        return ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)  # (N, 1)
    raise ValueError(f"importance_sampling_level={level!r} is not known; valid: token, sequence")


def off_policy_mask(
    advantages: torch.Tensor,
    logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    mask: torch.Tensor,
    threshold: float,
) -> torch.Tensor:
    """(N, 1) of 1 (keep) or 0 (drop), in ``mask``'s dtype: keep when ``A >= 0`` or mean KL <= ``threshold``.

    ``advantages`` (N,) or (N, 1); ``logp`` (N, T) the current policy (detached here);
    ``behaviour_logp`` (N, T) the log-probs the rollout sampled with (NaN counts as no evidence: 0);
    ``mask`` (N, T). The KL of a sequence is ``sum((behaviour_logp - logp) * mask) / max(|y|, 1)``.
    """
    kl = torch.nan_to_num(behaviour_logp - logp.detach(), nan=0.0)  # (N, T)
    mean_kl = (kl * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)  # (N, 1)
    adv = advantages.reshape(-1, 1)
    return ((adv >= 0) | (mean_kl <= threshold)).to(mask.dtype)
