"""RewardConfig: which reward functions score the completions (``model.rewards``), and what a failure does."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from infgrpo.rewards.core import REWARDS, OnError, resolve_reward
from infgrpo.rewards.signature import check_reward_call
from infgrpo.rewards.sources import is_model_source
from infgrpo.settings import ConfigError, check_types


@dataclass
class RewardConfig:
    """Reward functions with their weights; the completion's reward is the weighted sum."""

    functions: dict[str, float] = field(default_factory=lambda: {"synthetic": 1.0})
    """Reward functions and their weights, e.g. ``{reasoning_gym: 1.0}`` (TRL's ``reward_funcs`` with
    ``reward_weights``): names of the registry (``math``, ``reasoning_gym``, ``gsm8k``, ``numeric``, ``format``,
    ``overlong``, ``synthetic``, ...), ``module.path:function`` (``trl.rewards:accuracy_reward``: functions written
    for TRL run unchanged), a factory's call with literal arguments
    (``trl.rewards:get_soft_overlong_punishment(max_completion_len=256, soft_punish_cache=64)``), or the folder or
    hub id of a sequence-classification reward model (scored in token-budget micro-batches)."""
    accuracy: str | None = "synthetic"
    """The reward (one of ``functions``) whose value >= 1 counts as a correct answer, logged as accuracy;
    null disables the accuracy metric."""
    on_error: OnError = "raise"
    """What a failed reward (the function raised, or returned inf) does: ``raise`` (stop, naming the function, as
    TRL does); ``skip`` (left out of the weighted sum, as a None is); ``zero`` (score it 0; the 0 enters its group's
    mean and std, so the failed row is pushed down). ``skip`` and ``zero`` warn each time, with the count, and the
    failed completions are counted in ``train/rewards_failed``. A None (or NaN) value is no failure, whatever this
    says: the function does not apply to that row and is left out of its sum, as TRL does (a row no function
    applies to has reward NaN and advantage 0, with a warning)."""

    def __post_init__(self) -> None:
        check_types(self)
        if not self.functions:
            raise ConfigError("functions={} needs at least one reward function, e.g. {synthetic: 1.0}")
        for name, weight in self.functions.items():  # every name first: a misspelt one is named as such
            if is_model_source(name, REWARDS):  # a reward model: loaded when fit starts, not by the settings
                continue
            try:
                fn = resolve_reward(name)
            except ValueError as err:
                raise ConfigError(f"functions: {str(err).removeprefix('rewards: ')}") from err
            check_reward_call(name, fn)  # fn(completions, metadata, **info) binds: found now, not at step 1
            if not math.isfinite(weight):
                raise ConfigError(f"functions[{name!r}]={weight!r} must be a finite number")
        if self.accuracy is not None and self.accuracy not in self.functions:
            raise ConfigError(
                f"accuracy={self.accuracy!r} must be one of functions: {', '.join(self.functions)} (or null)"
            )
        if self.accuracy is not None and is_model_source(self.accuracy, REWARDS):
            raise ConfigError(
                f"accuracy={self.accuracy!r} is a reward model, whose score is unbounded: accuracy counts values >= 1 "
                "as correct answers, which says nothing of a model's score; name a verifier (a reward that scores 1 "
                "for a correct answer), or null"
            )
