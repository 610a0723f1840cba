"""Per-token entropy: from logits, the batch-wide high-entropy mask, and the adaptive entropy coefficient.

- :func:`entropy_from_logits`: ``H = -sum_v p_v log p_v`` of ``softmax(logits / T)``, the quantity TRL 1.16
  logs as ``entropy`` and the chunked LM head computes without full logits
  (:func:`~infgrpo.update.chunked_head.chunked_logprobs_and_entropy`).
- :func:`entropy_threshold` + :func:`high_entropy_mask`: ``top_entropy_quantile`` (rho of "Beyond the
  80/20 Rule"). TRL (``GRPOTrainer.get_high_entropy_mask``) takes the ``1 - rho`` quantile (linear
  interpolation, ``torch.quantile``) of the completion-token entropies of each micro-batch, gathered over
  ranks, so its mask depends on how the batch is split. Here the threshold is computed once from the
  *whole* batch on every rank (:func:`entropy_threshold`, before the first micro-batch); the mask of
  each micro-batch compares its entropies with it. With the whole batch in one micro-batch both agree
  (TRL rounds the threshold to float32; here it keeps the entropies' dtype).
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
    """``torch.quantile(values, q)`` (linear interpolation) of a 1-D tensor, without its 16M-element limit."""
    ordered = torch.sort(values).values
    rank = min(max(q, 0.0), 1.0) * (values.numel() - 1)  # a Python float (double): exact for any dtype of values
    below = math.floor(rank)
    lo, hi = ordered[below], ordered[min(below + 1, values.numel() - 1)]
    return torch.lerp(lo, hi, torch.scalar_tensor(rank - below, dtype=values.dtype, device=values.device))


def entropy_threshold(
    entropies: Iterable[torch.Tensor],
    masks: Iterable[torch.Tensor],
    top_entropy_quantile: float,
    ranks: Ranks = Ranks(),  # noqa: B008 - frozen dataclass, never mutated
) -> torch.Tensor | None:
    """The ``1 - top_entropy_quantile`` quantile (0-dim) of every completion token's entropy on every rank.

    ``entropies`` / ``masks``: this rank's micro-batches, each (n, C) (mask 1 on completion tokens).
    None when the whole batch has no token (every token is then masked out, as in TRL). Every rank
    calls it (it gathers); the result is the same on all.
    """
    values = torch.cat([e.detach()[m.bool()].reshape(-1) for e, m in zip(entropies, masks, strict=True)])  # (n,)
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
    """Bool (n, C): completion tokens (``mask``) whose ``entropy`` (n, C) is >= ``threshold`` (None: none)."""
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
