"""Adaptive groups in a training step (``model.adaptive_groups``): a prompt gets as many samples as its gradient needs.

    config = AdaptiveGroupsConfig(enabled=True, max_samples_per_prompt=64)
    spec = config.spec(judge, group_size=8, batch_size=4)   # the engine's AdaptiveSpec; judge: a GroupJudge

A group whose rewards are all equal has advantage 0 everywhere: no gradient. With adaptive groups the engine
keeps sampling such a prompt, ``extend_by`` samples at a time, while slots free up
(:mod:`infgrpo.sampler.engine.adaptive`), until its group has a reward spread, it holds
``max_samples_per_prompt`` samples, or the step's ``max_samples_per_step`` are spent. The update still trains on
``group_size`` samples of every prompt (PODS's rule, ``down_sample: max_variance``: the subset of largest
reward variance, so one right answer among 64 wrong ones is in it), so advantages, normalizers, the update's
cost and each group's weight in the loss are those of a fixed group.

``down_sample: none`` (training on every sample of a grown group) is not offered: the update, the advantages
(a (B, G) view), the shared-prompt packer, the DDP gather and TRL's normalizers all take one group size per
step, and unequal groups would change each prompt's weight in the loss (a ``grpo`` loss averages over rows:
a prompt with 64 rows would weigh 8x one with 8).

**With dynamic sampling** (both enabled): a group without spread is extended first; one still without spread
when it cannot grow (its cap, or the budget) is dropped and a new prompt drawn, while the budget holds a group.
**Without**: the step trains on its batch, every group down-selected to ``group_size``; groups never rescued
train with advantage 0 (the zero-advantage skip makes them free).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from infgrpo.sampler import AdaptiveSpec
from infgrpo.sampler.engine.adaptive import check_prompt_cap
from infgrpo.sampler.engine.plan import Judge, Rule
from infgrpo.settings import ConfigError, check_types

DownSample = Literal["max_variance"]


@dataclass
class AdaptiveGroupsConfig:
    """Adaptive groups: more samples for the prompts whose group has no reward spread yet (see the module)."""

    enabled: bool = False
    """Extend a group without reward spread by more samples of its prompt while the rollout decodes."""
    max_samples_per_prompt: int = 64
    """Most samples of one prompt in a step (>= ``group_size``); the slot pool bounds memory, not this."""
    max_samples_per_step: int | None = None
    """Most samples decoded in a step (per rank), the first ``group_size`` of every prompt included
    (>= ``data.batch_size`` x ``group_size``). null: 4 x ``data.batch_size`` x ``group_size``."""
    rule: Rule = "value"
    """Who gets the next samples: ``value`` (the stalled group most likely to get a spread per decoded token),
    ``uniform`` (the stalled groups in turn) or, with dynamic sampling, ``value_or_draw`` (``value``, and a stalled
    group whose chance per token is below a fresh prompt's is dropped for a new prompt)."""
    extend_by: int | None = None
    """Samples an extension adds (null: ``group_size``)."""
    down_sample: DownSample = "max_variance"
    """Which ``group_size`` samples of a grown group the update trains on: ``max_variance`` (PODS)."""

    def __post_init__(self) -> None:
        check_types(self)
        if self.max_samples_per_prompt < 2:
            raise ConfigError(f"max_samples_per_prompt={self.max_samples_per_prompt} must be >= 2 (>= group_size)")
        if self.max_samples_per_step is not None and self.max_samples_per_step < 1:
            raise ConfigError(
                f"max_samples_per_step={self.max_samples_per_step} must be >= 1 (or null: 4 x batch x group_size)"
            )
        if self.extend_by is not None and self.extend_by < 1:
            raise ConfigError(f"extend_by={self.extend_by} must be >= 1 (or null: group_size)")

    def check(self, group_size: int) -> None:
        """A ConfigError when a prompt could not hold its first group (the engine's rule)."""
        check_prompt_cap(self.max_samples_per_prompt, group_size)

    def budget(self, batch_size: int, group_size: int) -> int:
        """The step's sample budget for batches of ``batch_size``; a ConfigError when it is below one batch."""
        budget = self.max_samples_per_step if self.max_samples_per_step is not None else 4 * batch_size * group_size
        if budget < batch_size * group_size:
            raise ConfigError(
                f"adaptive_groups.max_samples_per_step={budget} is below data.batch_size x group_size="
                f"{batch_size * group_size}: a step decodes at least its batch's groups"
            )
        return budget

    def spec(self, judge: Judge, group_size: int, batch_size: int) -> AdaptiveSpec:
        """The engine's :class:`~infgrpo.sampler.AdaptiveSpec` for a step of ``batch_size`` prompts, judged by
        ``judge`` (:class:`~infgrpo.training.judged_rollout.GroupJudge`: spread, level, select)."""
        return AdaptiveSpec(
            judge, self.max_samples_per_prompt, self.budget(batch_size, group_size), self.rule,
            self.extend_by or group_size,
        )  # fmt: skip
