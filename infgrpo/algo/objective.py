"""The objective's settings: one frozen dataclass with TRL 1.16's option names, validated on creation.

``Objective`` gathers what :func:`~infgrpo.algo.objective_loss.objective_loss` needs to compute one
micro-batch's loss: the loss type and its parameters, the importance-sampling level (token, or
sequence = GSPO), the KL term, the entropy mask and bonus (with the adaptive schedule), the
off-policy sequence mask and the rollout log-prob mismatch correction. Field names and defaults are
TRL's (``trl/trainer/grpo_config.py: GRPOConfig``) except where noted on the field; the combinations
TRL refuses are refused here with the same meaning, and those TRL only warns about warn here
(``trl/trainer/grpo_trainer.py: GRPOTrainer.__init__`` and ``GRPOConfig.__post_init__``)::

    from infgrpo.algo import Objective
    Objective(loss_type="grpo", importance_sampling_level="sequence")     # GSPO
    Objective(loss_type="cispo", epsilon_high=5.0)                        # MiniMax-M1 / ScaleRL
    Objective(loss_type="vespo", rollout_correction="sequence_mask")      # ValueError (as TRL)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from infgrpo.algo.advantages import ADVANTAGES, ScaleRewards
from infgrpo.algo.kl import KL_ESTIMATORS
from infgrpo.settings import ConfigError, InfgrpoWarning, check_types

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]
ImportanceSamplingLevel = Literal["token", "sequence"]
RolloutCorrection = Literal["none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]

TOKEN_SUM_LOSSES = ("bnpo", "dr_grpo", "dapo", "cispo")
"""Loss types that sum per-token terms: at sequence level they weight each sequence by its length (TRL warns)."""


def _finite(field: str, value: object, rule: str, ok: Callable[[float], bool] = lambda v: True) -> None:
    """Raises a ValueError naming ``field`` and ``value`` unless ``value`` is a finite number and ``ok(value)``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not ok(value):
        raise ConfigError(f"{field}={value!r} must be {rule}")


@dataclass(frozen=True)
class Objective:
    """What the policy update minimizes (see :mod:`infgrpo.algo.objective_loss` for the formula)."""

    loss_type: LossType = "grpo"
    """``grpo`` (mean of sequence means), ``bnpo``, ``dapo``, ``dr_grpo`` (clipped surrogate, as before);
    ``cispo`` (MiniMax-M1: the importance weight is clipped at ``epsilon_high`` and detached, times
    ``A * logp``; sum / tokens); ``sapo`` (a soft gate ``sigmoid(tau (r - 1)) * 4 / tau`` instead of the
    clip; mean of sequence means); ``luspo`` (GSPO scaled by each sequence's length: sum over its tokens,
    mean over sequences; meant with ``importance_sampling_level: sequence``); ``vespo`` (a detached gamma
    weight of the sequence's importance ratio times ``A * logp``; sum / tokens). TRL's default is ``dapo``;
    ours stays ``grpo`` (GRPOModule's)."""
    epsilon_low: float = 0.2
    """Lower clip: the ratio is clipped below at ``1 - epsilon_low`` (TRL's ``epsilon``)."""
    epsilon_high: float = 0.2
    """Upper clip at ``1 + epsilon_high`` (DAPO: 0.28). With ``cispo`` it is the cap itself, ``epsilon_max``
    (ScaleRL recommends 5.0), as in TRL. (TRL's ``None`` = ``epsilon`` is spelled out here.)"""
    delta: float | None = None
    """Two-sided clipping (INTELLECT-2): the unclipped ratio is also capped at ``delta`` (clipped losses only);
    None disables it. Recommended above ``1 + epsilon_high``."""
    beta: float = 0.0
    """KL coefficient against the reference policy."""
    kl_estimator: str = "k3"
    """``k3`` (TRL's), ``k1`` or ``k2``."""
    kl_bias_correction: bool = True
    """Multiply the KL estimate by the importance weight (TRL's ``use_bias_correction_kl``, on by default
    in TRL 1.16): the unbiased reverse-KL gradient of DeepSeek-V3.2."""
    importance_sampling_level: ImportanceSamplingLevel = "token"
    """``token``: one ratio per token; ``sequence`` (GSPO): ``exp`` of the mean log-ratio over the
    sequence's tokens, one ratio per sequence."""
    sapo_temperature_pos: float = 1.0
    """SAPO's gate temperature for tokens of positive advantage."""
    sapo_temperature_neg: float = 1.05
    """SAPO's gate temperature for tokens of zero or negative advantage."""
    vespo_k_pos: float = 2.0
    """VESPO's power k for sequences of advantage >= 0 (how fast weights fall for ratios below 1)."""
    vespo_lambda_pos: float = 3.0
    """VESPO's decay lambda for sequences of advantage >= 0 (how fast weights fall for ratios above 1)."""
    vespo_k_neg: float = 3.0
    """VESPO's power k for sequences of negative advantage."""
    vespo_lambda_neg: float = 2.0
    """VESPO's decay lambda for sequences of negative advantage."""
    top_entropy_quantile: float = 1.0
    """rho of "Beyond the 80/20 Rule": the policy term keeps only tokens whose entropy is at or above the
    ``1 - rho`` quantile of the batch's completion-token entropies (0.2 in the paper; 1 keeps all; 0 keeps
    the highest). The quantile is over the whole batch on every rank, not per micro-batch as in TRL."""
    entropy_coef: float = 0.0
    """Entropy bonus: ``loss -= entropy_coef * mean entropy`` over the tokens the policy term keeps, the same
    meaning for every loss type. The initial coefficient with ``use_adaptive_entropy``."""
    use_adaptive_entropy: bool = False
    """Skywork-OR1's schedule: after each optimizer step the coefficient moves by ``entropy_coef_delta``,
    up when that step's mean entropy is at or below ``entropy_target`` and down otherwise, within
    [``entropy_coef_min``, ``entropy_coef_max``]; it is applied only while the last step's entropy is at or
    below the target (none on the first step)."""
    entropy_coef_min: float = 0.0
    """Lower bound of the adaptive coefficient."""
    entropy_coef_max: float = 1.0
    """Upper bound of the adaptive coefficient."""
    entropy_coef_delta: float = 0.005
    """Step of the adaptive coefficient per optimizer step."""
    entropy_target: float = 0.2
    """Target mean entropy (nats) of the adaptive schedule, over the tokens the policy term keeps."""
    off_policy_mask_threshold: float | None = None
    """DeepSeek-V3.2's off-policy sequence mask (delta of its Eq. 9): a sequence of negative advantage whose
    mean ``behaviour logp - policy logp`` over its tokens exceeds this is left out of the policy term.
    None disables it."""
    rollout_correction: RolloutCorrection = "none"
    """Correction of the mismatch between the rollout's (behaviour) log-probs and the training forward's, as
    TRL's ``vllm_importance_sampling_mode`` (``none`` = its ``vllm_importance_sampling_correction: False``):
    ``token_truncate`` / ``token_mask`` weight each token by ``exp(policy - behaviour)`` clipped to, or zero
    outside, [``clip_min``, ``clip_max``]; ``sequence_*`` the same with the ratio of the whole sequence
    (``exp`` of the summed differences). TRL defaults it on (``sequence_mask``) for vLLM; our engine's
    mismatch is small, so it is off unless asked."""
    rollout_correction_clip_max: float | None = 3.0
    """Upper bound C_max of the correction (TRL's ``vllm_importance_sampling_clip_max``); None: none."""
    rollout_correction_clip_min: float | None = None
    """Lower bound C_min of the correction (TRL's ``vllm_importance_sampling_clip_min``); None: none."""
    mask_truncated_completions: bool = False
    """Leave completions cut at ``sampler.max_new_tokens`` out of the loss (DAPO's overlong filtering; TRL's
    option of the same name). They still count in their group's advantages."""
    advantage: str = "grpo"
    """Advantage estimator, by name (``grpo``: the group-relative advantage, see :mod:`infgrpo.algo.advantages`)."""
    scale_rewards: ScaleRewards = "group"
    """Which std divides the centered rewards (TRL's ``scale_rewards``): ``group`` (each group's), ``batch``
    (the whole generation batch's, over every rank) or ``none`` (Dr. GRPO)."""

    def __post_init__(self) -> None:
        # 1) names from registries (the Literal ones, loss_type to scale_rewards, are check_types' in 3)
        KL_ESTIMATORS.check(self.kl_estimator)
        ADVANTAGES.check(self.advantage)
        # 2) ranges (before check_types: a number's message says its range)
        for name in ("epsilon_low", "epsilon_high", "beta", "vespo_k_pos", "vespo_lambda_pos"):
            _finite(name, getattr(self, name), "a number >= 0", lambda v: v >= 0)
        for name in ("vespo_k_neg", "vespo_lambda_neg", "entropy_coef_delta"):
            _finite(name, getattr(self, name), "a number >= 0", lambda v: v >= 0)
        for name in ("sapo_temperature_pos", "sapo_temperature_neg"):
            _finite(name, getattr(self, name), "a number > 0 (the gate divides by it)", lambda v: v > 0)
        if self.epsilon_low >= 1:
            raise ConfigError(
                f"epsilon_low={self.epsilon_low} must be in [0, 1): the ratio is clipped below at 1 - epsilon_low, "
                "which at 0 or below never binds (TRL's epsilon; DAPO uses 0.2)"
            )
        _finite("top_entropy_quantile", self.top_entropy_quantile, "in [0, 1] (the share kept)", lambda v: 0 <= v <= 1)
        for name in ("entropy_coef", "entropy_coef_min", "entropy_coef_max", "entropy_target"):
            _finite(name, getattr(self, name), "a finite number")
        if self.entropy_coef_min > self.entropy_coef_max:
            raise ConfigError(
                f"entropy_coef_min={self.entropy_coef_min} must be <= entropy_coef_max={self.entropy_coef_max}"
            )
        if self.use_adaptive_entropy and not self.entropy_coef_min <= self.entropy_coef <= self.entropy_coef_max:
            raise ConfigError(
                f"entropy_coef={self.entropy_coef} (the adaptive schedule's start) must be in [entropy_coef_min="
                f"{self.entropy_coef_min}, entropy_coef_max={self.entropy_coef_max}]"
            )
        if self.delta is not None:
            _finite("delta", self.delta, "None or a number > 0 (the cap of the unclipped ratio)", lambda v: v > 0)
            if self.delta <= 1 + self.epsilon_high:
                warnings.warn(
                    f"[infgrpo] delta={self.delta} is not above 1 + epsilon_high={1 + self.epsilon_high}: the "
                    "two-sided clip then also caps ratios the ordinary clip would leave alone (INTELLECT-2 recommends "
                    "delta > 1 + epsilon_high)",
                    InfgrpoWarning,
                    stacklevel=3,
                )
        if self.off_policy_mask_threshold is not None:
            t = self.off_policy_mask_threshold
            _finite(
                "off_policy_mask_threshold",
                t,
                "None or a number >= 0 (a mean KL per token, e.g. 0.5)",
                lambda v: v >= 0,
            )
        lo, hi = self.rollout_correction_clip_min, self.rollout_correction_clip_max
        if lo is not None:
            _finite("rollout_correction_clip_min", lo, "None or a number >= 0 (a bound on a ratio)", lambda v: v >= 0)
        if hi is not None:
            _finite("rollout_correction_clip_max", hi, "None or a number > 0 (a bound on a ratio)", lambda v: v > 0)
        # 3) types: what the checks above leave, the booleans and the Literal choices (unknown names listed)
        check_types(self)
        # 4) combinations
        self._check_rollout_correction()
        self._warn_like_trl()

    def _check_rollout_correction(self) -> None:
        """TRL's rules for ``vllm_importance_sampling_*`` (``GRPOConfig.__post_init__``, ``GRPOTrainer.__init__``)."""
        lo, hi, mode = self.rollout_correction_clip_min, self.rollout_correction_clip_max, self.rollout_correction
        if lo is not None and hi is not None and lo >= hi:
            raise ConfigError(f"rollout_correction_clip_min={lo} must be less than rollout_correction_clip_max={hi}")
        if mode.endswith("_truncate") and lo is None and hi is None:
            raise ConfigError(
                f"rollout_correction={mode!r} needs rollout_correction_clip_min or rollout_correction_clip_max "
                "(a truncation needs a bound)"
            )
        if self.loss_type == "vespo" and mode.startswith("sequence_"):
            raise ConfigError(
                f"rollout_correction={mode!r} cannot be used with loss_type='vespo' (VESPO folds per-token "
                "corrections into its sequence weight); valid with vespo: none, token_truncate, token_mask"
            )

    def _warn_like_trl(self) -> None:
        """The combinations TRL accepts with a warning (``GRPOTrainer.__init__``), and CISPO's cap below 1."""
        level = self.importance_sampling_level
        if self.loss_type == "luspo" and level != "sequence":
            warnings.warn(
                "[infgrpo] loss_type='luspo' is meant with importance_sampling_level='sequence' (the LUSPO paper's "
                "setup)",
                InfgrpoWarning,
                stacklevel=4,
            )
        if self.loss_type == "vespo" and level != "token":
            warnings.warn(
                "[infgrpo] loss_type='vespo' computes sequence-level weights itself; importance_sampling_level should "
                "be 'token' (the default)",
                InfgrpoWarning,
                stacklevel=4,
            )
        if level == "sequence" and self.loss_type in TOKEN_SUM_LOSSES:
            warnings.warn(
                f"[infgrpo] importance_sampling_level='sequence' with loss_type={self.loss_type!r} sums per-token "
                "terms, which weights each sequence by its length; GSPO's setup is loss_type='grpo'",
                InfgrpoWarning,
                stacklevel=4,
            )
        if self.loss_type == "cispo" and self.epsilon_high <= 1:
            warnings.warn(
                f"[infgrpo] loss_type='cispo' caps the importance weight at epsilon_high={self.epsilon_high} itself "
                "(not at 1 + epsilon_high), which scales down every on-policy token; ScaleRL recommends "
                "epsilon_high=5.0",
                InfgrpoWarning,
                stacklevel=4,
            )

    @property
    def entropy_bonus(self) -> bool:
        """Whether the loss has an entropy term (TRL: ``entropy_coef != 0`` or the adaptive schedule)."""
        return self.entropy_coef != 0.0 or self.use_adaptive_entropy

    @property
    def entropy_mask(self) -> bool:
        """Whether the policy term keeps only high-entropy tokens (``top_entropy_quantile < 1``)."""
        return self.top_entropy_quantile < 1.0

    @property
    def needs_entropy(self) -> bool:
        """Whether the loss itself needs per-token entropies (the mask or the bonus; logging always wants them)."""
        return self.entropy_bonus or self.entropy_mask
