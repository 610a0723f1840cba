"""The per-token policy term of each loss type, chosen by name (TRL 1.16 ``GRPOTrainer._compute_loss``).

Inputs (:class:`PolicyInputs`; N sequences, T completion positions): ``logp`` (N, T) with the gradient,
``log_ratio = logp - old_logp`` (N, T), the importance weight ``coef = exp(log w)``, (N, T) at token
level or (N, 1) at sequence level (:func:`~infgrpo.algo.importance.log_importance_weights`), and
``adv`` (N, 1). Each term returns a loss of ``coef``'s shape or (N, T), before masks and aggregation::

    grpo, bnpo, dr_grpo, dapo, luspo:  -min(c * A, clamp(coef, 1 - eps_low, 1 + eps_high) * A),
                                       c = min(coef, delta) when delta is set (INTELLECT-2), else coef
    cispo (MiniMax-M1):                -sg[min(coef, eps_high)] * A * logp
    sapo (SAPO):                       -sigmoid(tau (coef - 1)) * 4 / tau * A,  tau = tau_pos if A > 0 else tau_neg
    vespo (VESPO):                     -sg[phi(w)] * A * logp,  phi(w) = exp(lam + k log w - lam w),
                                       w = the sequence's ratio prod(exp(log_ratio)) (times the rollout
                                       correction's token weights), k / lam by the sign of A

SAPO's gate has gradient ``4 s (1 - s) * coef * dlogp``, which is ``coef * dlogp`` at ``coef = 1``: the plain
policy gradient on-policy, smoothly damped off-policy. VESPO's phi is 1 at w = 1 and is detached, so it
only scales ``A * dlogp``. The statistics (``stats``) are per-token flags or per-sequence values that the
update averages as TRL logs them (``clip_ratio/*``, ``cispo_clip_ratio``, ``vespo/phi_seq_mean``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from infgrpo.algo.objective import Objective
from infgrpo.registry import Registry

POLICY_TERMS = Registry("loss_type")
LOG_EPS = math.log(1e-8)
"""VESPO's lower clamp of log-weights (``log 1e-8``), as in its reference implementation and TRL."""


@dataclass
class PolicyInputs:
    """One micro-batch's tensors for a policy term (shapes in the module docstring)."""

    logp: torch.Tensor
    log_ratio: torch.Tensor
    coef: torch.Tensor
    adv: torch.Tensor
    mask: torch.Tensor
    rollout_weights: torch.Tensor | None = None
    """Token-level rollout-correction weights (N, T), which VESPO folds into its sequence weight."""


@dataclass
class PolicyTerm:
    """The policy loss (N, T) or (N, 1) and statistics by metric name, each (N, T) (token mean) or (N, 1) (row mean)."""

    loss: torch.Tensor
    stats: dict[str, torch.Tensor] = field(default_factory=dict)


@POLICY_TERMS.register("grpo")
@POLICY_TERMS.register("bnpo")
@POLICY_TERMS.register("dr_grpo")
@POLICY_TERMS.register("dapo")
@POLICY_TERMS.register("luspo")
def clipped_term(x: PolicyInputs, obj: Objective) -> PolicyTerm:
    """PPO's clipped surrogate on ``coef`` with TRL's optional two-sided cap ``delta``."""
    clipped = torch.clamp(x.coef, 1.0 - obj.epsilon_low, 1.0 + obj.epsilon_high)
    coef = torch.clamp(x.coef, max=obj.delta) if obj.delta is not None else x.coef
    loss = -torch.min(coef * x.adv, clipped * x.adv)
    low = (coef < 1.0 - obj.epsilon_low) & (x.adv < 0)
    high = (coef > 1.0 + obj.epsilon_high) & (x.adv > 0)
    stats = {"clip_ratio/low": low.to(x.mask.dtype), "clip_ratio/high": high.to(x.mask.dtype)}
    stats["clip_ratio"] = (low | high).to(x.mask.dtype)
    return PolicyTerm(loss, stats)


@POLICY_TERMS.register("cispo")
def cispo_term(x: PolicyInputs, obj: Objective) -> PolicyTerm:
    """CISPO: the importance weight clipped at ``epsilon_high`` and detached, times ``A * logp``."""
    weight = torch.clamp(x.coef, max=obj.epsilon_high).detach()
    clipped = (x.coef > obj.epsilon_high) & (x.adv > 0)
    return PolicyTerm(-weight * x.adv * x.logp, {"cispo_clip_ratio": clipped.to(x.mask.dtype)})


@POLICY_TERMS.register("sapo")
def sapo_term(x: PolicyInputs, obj: Objective) -> PolicyTerm:
    """SAPO: a sigmoid gate of temperature ``sapo_temperature_pos`` (A > 0) or ``_neg`` (A <= 0)."""
    tau = torch.where(x.adv > 0, x.adv.new_tensor(obj.sapo_temperature_pos), x.adv.new_tensor(obj.sapo_temperature_neg))
    gate = torch.sigmoid(tau * (x.coef - 1.0)) * 4.0 / tau
    return PolicyTerm(-gate * x.adv)


@torch.no_grad()
def gamma_weights(
    adv: torch.Tensor,
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    rollout_weights: torch.Tensor | None,
    k_pos: float,
    lambda_pos: float,
    k_neg: float,
    lambda_neg: float,
) -> torch.Tensor:
    """VESPO's detached sequence weights phi (N, 1) (TRL ``GRPOTrainer.get_gamma_weights``).

    ``log w = clamp(sum(clamp(log_ratio, -20, 20) * mask) + sum(clamp(log rollout_weights, log 1e-8, 20) * mask),
    log 1e-8, 20)`` per sequence; ``phi = exp(lam + k log w - lam w)`` with ``(k, lam)`` the ``_pos`` pair for
    ``A >= 0`` and the ``_neg`` pair otherwise (``lam`` at least 1e-4); non-finite phi becomes 0.
    ``adv`` (N, 1); ``log_ratio``, ``mask``, ``rollout_weights`` (N, T).
    """
    seq = (torch.clamp(log_ratio, -20.0, 20.0) * mask).sum(-1, keepdim=True)  # (N, 1)
    if rollout_weights is not None:
        if rollout_weights.shape != mask.shape:
            raise ValueError(
                f"vespo takes token-level rollout-correction weights {tuple(mask.shape)}, got "
                f"{tuple(rollout_weights.shape)} (rollout_correction: token_truncate or token_mask)"
            )
        seq = seq + (torch.clamp(torch.log(rollout_weights), LOG_EPS, 20.0) * mask).sum(-1, keepdim=True)
    log_w = torch.clamp(seq, LOG_EPS, 20.0)
    nonneg = adv >= 0
    k = torch.where(nonneg, adv.new_tensor(k_pos), adv.new_tensor(k_neg))
    lam = torch.where(nonneg, adv.new_tensor(lambda_pos), adv.new_tensor(lambda_neg)).clamp(min=1e-4)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
    return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


@POLICY_TERMS.register("vespo")
def vespo_term(x: PolicyInputs, obj: Objective) -> PolicyTerm:
    """VESPO: the detached gamma weight of the sequence's importance ratio, times ``A * logp``."""
    phi = gamma_weights(
        x.adv,
        x.log_ratio,
        x.mask,
        x.rollout_weights,
        obj.vespo_k_pos,
        obj.vespo_lambda_pos,
        obj.vespo_k_neg,
        obj.vespo_lambda_neg,
    )  # (N, 1)
    return PolicyTerm(-phi * x.adv * x.logp, {"vespo/phi_seq_mean": phi})
