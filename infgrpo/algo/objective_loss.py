"""One micro-batch's loss under an :class:`~infgrpo.algo.Objective`, as TRL 1.16 composes it.

Per micro-batch (n sequences, C completion positions; TRL ``GRPOTrainer._compute_loss``)::

    log w    = log_importance_weights(logp, old_logp, mask, importance_sampling_level)   # (n, C) | (n, 1)
    term     = POLICY_TERMS[loss_type](logp, logp - old_logp, exp(log w), A)              # policy_terms.py
    term    *= off_policy_mask(A, logp, behaviour_logp, mask, threshold)                  # (n, 1), if set
    term    *= high_entropy_mask(entropy, mask, batch threshold)                          # (n, C), if rho < 1
    term    *= rollout_correction_weights(old_logp, behaviour_logp, ...)                  # not for vespo
    term    += beta * kl(logp, ref_logp) (* exp(log w) with kl_bias_correction)
    loss     = NORMALIZERS[loss_type](term, mask, norm)                                   # whole-batch counts
             - entropy_coef * sum(entropy * mask * entropy_mask) / norm.num_bonus_tokens

``norm`` holds counts over the whole optimization batch on every rank, so the losses (and gradients) of
any split into micro-batches add up to the one-batch loss. TRL's own definition depends on the split
in three places, where this one equals TRL's with the whole batch in one micro-batch instead: ``bnpo``
(TRL: tokens of each micro-batch), the entropy mask's quantile (TRL: per micro-batch; here from
:func:`~infgrpo.algo.entropy.entropy_threshold` over the batch) and the entropy bonus's mean (TRL: per
micro-batch divided by the accumulation steps; here by the batch's kept tokens). ``old_logp`` None means
``num_iterations == 1`` (old = ``logp`` detached), and then the correction weights and mismatch
statistics come from this forward; with ``old_logp`` given (``num_iterations > 1``: a frozen copy
before the first of them) they come from it, unchanged across iterations, as TRL's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from infgrpo.algo.importance import log_importance_weights, off_policy_mask
from infgrpo.algo.kl import KL_ESTIMATORS
from infgrpo.algo.losses import NORMALIZERS, LossNorm
from infgrpo.algo.objective import Objective
from infgrpo.algo.policy_terms import POLICY_TERMS, PolicyInputs
from infgrpo.algo.rollout_correction import mismatch_sums, rollout_correction_weights
from infgrpo.runtime.ranks import Ranks


@dataclass
class ObjectiveOutput:
    """A micro-batch's ``loss`` (its share of the batch loss, to backpropagate) and its statistics.

    ``policy_loss``: the loss without the entropy bonus (detached). ``means``: metric name ->
    (2,) float64 [sum, count], reduced by :func:`reduce_means`. ``bonus``: (2,) [entropy sum, tokens] over
    the tokens the bonus averages, for :meth:`~infgrpo.algo.AdaptiveEntropyCoef.update`. ``mismatch``:
    :func:`~infgrpo.algo.rollout_correction.mismatch_sums` (4,) when behaviour log-probs were given.
    """

    loss: torch.Tensor
    policy_loss: torch.Tensor
    means: dict[str, torch.Tensor] = field(default_factory=dict)
    bonus: torch.Tensor | None = None
    mismatch: torch.Tensor | None = None


def _mean_sums(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[sum, count] float64 of a statistic: a token mean over ``mask`` if ``x`` is (n, C), a row mean if (n, 1)."""
    x = x.detach().double()
    if x.shape[-1] == 1 and mask.shape[-1] != 1:
        return torch.stack([x.sum(), x.new_tensor(float(x.shape[0]))])
    m = mask.detach().double()
    return torch.stack([(x * m).sum(), m.sum()])


def objective_loss(
    obj: Objective,
    logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    norm: LossNorm,
    *,
    old_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    entropy_mask: torch.Tensor | None = None,
    behaviour_logp: torch.Tensor | None = None,
    entropy_coef: float | None = None,
) -> ObjectiveOutput:
    """The loss of one micro-batch (see the module docstring) and its statistics.

    ``logp`` (n, C) with the gradient; ``advantages`` (n,); ``mask`` (n, C) float, 1 on completion tokens;
    ``norm`` whole-batch counts (with ``num_bonus_tokens`` when the entropy mask and bonus are both on);
    ``old_logp`` / ``ref_logp`` / ``behaviour_logp`` (n, C) without gradient; ``entropy`` (n, C), with a
    gradient when the bonus is on; ``entropy_mask`` (n, C) bool from
    :func:`~infgrpo.algo.entropy.high_entropy_mask` (needed when ``top_entropy_quantile < 1``);
    ``entropy_coef``: the coefficient of this optimizer step (``AdaptiveEntropyCoef.applied()``; None =
    ``obj.entropy_coef``, refused under ``use_adaptive_entropy``).
    """
    # 1) what the options need
    if obj.beta != 0.0 and ref_logp is None:
        raise ValueError(f"beta={obj.beta} needs reference log-probs (ref_logp)")
    if obj.rollout_correction != "none" and behaviour_logp is None:
        raise ValueError(
            f"rollout_correction={obj.rollout_correction!r} needs the rollout's log-probs (behaviour_logp)"
        )
    if obj.needs_entropy and entropy is None:
        raise ValueError("top_entropy_quantile < 1 and the entropy bonus need per-token entropies (entropy)")
    if obj.entropy_mask and entropy_mask is None:
        raise ValueError(
            f"top_entropy_quantile={obj.top_entropy_quantile} needs the batch's entropy mask (entropy_mask, from "
            "high_entropy_mask with entropy_threshold)"
        )
    if entropy_coef is None:
        if obj.use_adaptive_entropy:
            raise ValueError("use_adaptive_entropy: pass entropy_coef=AdaptiveEntropyCoef.applied() for this step")
        entropy_coef = obj.entropy_coef
    mask = mask.to(logp.dtype)
    old = logp.detach() if old_logp is None else old_logp
    adv = advantages.reshape(-1, 1).to(logp)  # (n, 1)
    # 2) importance weights and the rollout correction (from the rollout's weights: the frozen copy or this forward)
    log_ratio = logp - old  # (n, C)
    coef = torch.exp(log_importance_weights(logp, old, mask, obj.importance_sampling_level))  # (n, C) | (n, 1)
    weights = None
    if obj.rollout_correction != "none":
        weights = rollout_correction_weights(
            old,
            behaviour_logp,
            mask,
            obj.rollout_correction,
            obj.rollout_correction_clip_min,
            obj.rollout_correction_clip_max,
        )
    # 3) the policy term and its masks
    vespo = obj.loss_type == "vespo"
    term = POLICY_TERMS.get(obj.loss_type)(
        PolicyInputs(logp, log_ratio, coef, adv, mask, weights if vespo else None), obj
    )
    per_token = term.loss
    means = {name: _mean_sums(x, mask) for name, x in term.stats.items()}
    if obj.off_policy_mask_threshold is not None:
        sampled = behaviour_logp if behaviour_logp is not None else old
        keep = off_policy_mask(adv, logp, sampled, mask, obj.off_policy_mask_threshold)  # (n, 1)
        per_token = per_token * keep
        means["off_policy_mask/dropped"] = _mean_sums(1.0 - keep, mask)
    if obj.entropy_mask:
        per_token = per_token * entropy_mask.to(logp.dtype)
    if weights is not None:
        means["rollout/correction_weight_mean"] = _mean_sums(weights, mask)
        if not vespo:
            per_token = per_token * weights
    # 4) the KL term, the normalization, the entropy bonus
    if obj.beta != 0.0:
        kl = KL_ESTIMATORS.get(obj.kl_estimator)(logp, ref_logp)  # (n, C)
        if obj.kl_bias_correction:
            kl = kl * coef
        per_token = per_token + obj.beta * kl
        means["kl"] = _mean_sums(kl, mask)
    loss = NORMALIZERS.get(obj.loss_type)(per_token, mask, norm)
    policy = loss.detach()
    bonus = None
    if entropy is not None:
        means["entropy"] = _mean_sums(entropy, mask)
    if obj.entropy_bonus:
        kept = mask * entropy_mask.to(mask.dtype) if obj.entropy_mask else mask
        tokens = norm.num_tokens if norm.num_bonus_tokens is None else norm.num_bonus_tokens
        entropy_sum = (entropy.to(logp.dtype) * kept).sum()
        loss = loss - entropy_coef * entropy_sum / max(tokens, 1)
        bonus = torch.stack([entropy_sum.detach().double(), kept.sum().double()])
    mismatch = mismatch_sums(old, behaviour_logp, mask) if behaviour_logp is not None else None
    return ObjectiveOutput(loss, policy, means, bonus, mismatch)


def reduce_means(outputs: list[ObjectiveOutput], ranks: Ranks = Ranks()) -> dict[str, float]:  # noqa: B008
    """Each statistic's mean over every micro-batch on every rank (every rank calls it, with the same options)."""
    names = sorted(outputs[0].means)
    sums = torch.stack([torch.stack([o.means[k] for k in names]) for o in outputs]).sum(0)  # (k, 2)
    sums = ranks.sum(sums)
    return {k: (s / max(c, 1.0)) for k, (s, c) in zip(names, sums.tolist(), strict=True)}
