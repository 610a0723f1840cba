"""Per-token entropy: from logits, the batch-wide high-entropy mask, and the adaptive entropy coefficient.

- :func:`entropy_from_logits`: ``H = -sum_v p_v log p_v`` of ``softmax(logits / T)``, the quantity TRL 1.16
  logs as ``entropy`` and the chunked LM head computes without full logits
  (:func:`~infgrpo.update.chunked_head.chunked_logprobs_and_entropy`).
- :func:`entropy_threshold` + :func:`high_entropy_mask`: ``top_entropy_quantile`` (rho of "Beyond the
  80/20 Rule"). TRL (``GRPOTrainer.get_high_entropy_mask``) takes the ``1 - rho`` quantile
  (``torch.quantile``, linear interpolation) of the completion-token entropies rounded to float32, so the
  threshold is a float32 number, and keeps the tokens whose entropy (in its own dtype) is >= it. The
  threshold here is computed the same way, in float32 with ``torch.quantile``'s float32 rank and
  interpolation (:func:`quantile`), so ties fall as in TRL: a float64 entropy on the quantile (say the
  median of an odd count) is dropped where its float32 rounding went up, kept where it went down. One
  difference remains,
  by design: TRL takes the quantile of each micro-batch (gathered over ranks), so its mask depends on how
  the batch is split; here it is computed once from the *whole* batch on every rank (before the first
  micro-batch) and each micro-batch's mask compares its entropies with it. With the whole batch in one
  micro-batch the masks are identical (tested against TRL's ``_compute_loss``, ties included).
- :class:`AdaptiveEntropyCoef`: Skywork-OR1's schedule as TRL applies it (``GRPOTrainer._compute_loss``):
  the coefficient used during an optimizer step is the current one if the previous step's mean entropy
  was at or below the target, else 0 (so none on the first step); after the step it moves by ``delta``
  up (entropy <= target) or down, within [min, max].
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from infgrpo.runtime.ranks import Ranks


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy (...,) of ``softmax(logits / temperature)`` over the last axis of ``logits`` (..., V), differentiable.

    Computed in float32 at least (float64 stays float64); ``temperature`` <= 0 counts as 1 (greedy).
    """
    z = logits.to(torch.promote_types(logits.dtype, torch.float32))
    if temperature > 0 and temperature != 1.0:
        z = z / temperature
    logp = torch.log_softmax(z, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """``torch.quantile(values, q)`` (linear interpolation) of a 1-D float32 or float64 tensor, bit for bit,
    without its 16M-element limit: ``q`` and the rank ``q (n - 1)`` are in ``values``' dtype, as there."""
    ordered = torch.sort(values).values
    rank = torch.scalar_tensor(min(max(q, 0.0), 1.0), dtype=values.dtype, device=values.device) * (values.numel() - 1)
    below, above = rank.long(), torch.ceil(rank).long()
    return torch.lerp(ordered[below], ordered[above], rank - below)


def entropy_threshold(
    entropies: Iterable[torch.Tensor],
    masks: Iterable[torch.Tensor],
    top_entropy_quantile: float,
    ranks: Ranks = Ranks(),  # noqa: B008 - frozen dataclass, never mutated
) -> torch.Tensor | None:
    """The ``1 - top_entropy_quantile`` quantile (0-dim, float32) of every completion token's entropy on every
    rank, computed as TRL does: of the entropies rounded to float32, with ``torch.quantile``'s arithmetic.

    ``entropies`` / ``masks``: this rank's micro-batches, each (n, C) (mask 1 on completion tokens).
    None when the whole batch has no token (every token is then masked out, as in TRL). Every rank
    calls it (it gathers); the result is the same on all.
    """
    values = torch.cat([e.detach()[m.bool()].reshape(-1) for e, m in zip(entropies, masks, strict=True)]).float()
    # (n,) float32, as TRL's ``entropies[mask.bool()].float()``
    if ranks.world_size > 1:
        longest = int(ranks.max(torch.tensor([values.numel()], device=values.device)).item())
        padded = torch.full((longest,), -math.inf, dtype=values.dtype, device=values.device)
        padded[: values.numel()] = values
        gathered = ranks.gather(padded)
        values = gathered[gathered != -math.inf]  # entropies are >= 0: the padding cannot be a real value
    if values.numel() == 0:
        return None
    return quantile(values, 1.0 - top_entropy_quantile)


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, threshold: torch.Tensor | None) -> torch.Tensor:
    """Bool (n, C): completion tokens (``mask``) whose ``entropy`` (n, C) is >= ``threshold`` (None: none).

    The comparison is in ``entropy``'s dtype (float32 or float64; the float32 threshold converts exactly), as
    in TRL."""
    if threshold is None:
        return torch.zeros_like(mask, dtype=torch.bool)
    return (entropy.detach() >= threshold) & mask.bool()


@dataclass
class AdaptiveEntropyCoef:
    """The entropy bonus's coefficient under ``use_adaptive_entropy`` (a small state kept in checkpoints).

    Per optimizer step: the loss uses :meth:`applied`; after the step, :meth:`update` gets the step's
    entropy sum and token count over the tokens the policy term kept (summed over micro-batches and
    ranks). ``last_entropy`` starts at +inf, so the first step applies no bonus.
    """

    coef: float
    target: float
    coef_min: float
    coef_max: float
    delta: float
    last_entropy: float = math.inf

    @classmethod
    def from_objective(cls, obj: object) -> AdaptiveEntropyCoef | None:
        """The schedule of an :class:`~infgrpo.algo.Objective`; None unless it sets ``use_adaptive_entropy``."""
        if not getattr(obj, "use_adaptive_entropy", False):
            return None
        return cls(
            obj.entropy_coef, obj.entropy_target, obj.entropy_coef_min, obj.entropy_coef_max, obj.entropy_coef_delta
        )

    def applied(self) -> float:
        """The coefficient the loss uses this step: ``coef`` if the last step's entropy was <= target, else 0."""
        return self.coef if self.last_entropy <= self.target else 0.0

    def update(self, entropy_sum: float, tokens: float) -> float:
        """Moves ``coef`` after an optimizer step from that step's entropy; returns the mean entropy."""
        entropy = float(entropy_sum) / max(float(tokens), 1.0)
        if entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.coef_max)
        else:
            self.coef = max(self.coef - self.delta, self.coef_min)
        self.last_entropy = entropy
        return entropy

    def state_dict(self) -> dict[str, float]:
        """The mutable state, under TRL's checkpoint keys."""
        return {"entropy_coef": self.coef, "last_world_entropy": self.last_entropy}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restores :meth:`state_dict`'s output."""
        self.coef = float(state["entropy_coef"])
        self.last_entropy = float(state["last_world_entropy"])
