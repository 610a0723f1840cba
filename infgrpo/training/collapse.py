"""A run in which nothing trains warns once: a collapsed policy, or rewards that score no completion.

    watch = CollapseWatch(settings.optimizer, settings.rewards)
    watch(metrics, trainer.global_step)     # after each step's metrics; rank zero warns the first time each fires

A learning rate far too high (``learning_rate: 10`` on the tiny model) can collapse the policy in one update
while every number stays finite: from then on each prompt's completions are one and the same (mean token
entropy 0, every completion cut at ``max_new_tokens``), every group's rewards are equal
(``frac_reward_zero_std`` 1), the advantages and the loss are 0, and nothing can move the policy again.
:class:`~infgrpo.training.divergence.DivergenceError` is for non-finite values; this is a warning, since a
policy that solved every prompt also has equal rewards and may have a low entropy: the text gives the numbers
so that the reader can tell which. The entropy is the update's mean over the tokens of the rows it ran (with
``update.skip_zero_advantage`` and no reward spread: one row).

The other way nothing trains with every number finite: a reward that returns None for every completion (it applies
to none of the rows) or fails for every one under ``rewards.on_error: skip`` (a function that raises) leaves every
completion unscorable (its reward NaN, its advantage 0): the logged reward is NaN step after step. The scoring
warns at each such step (:mod:`infgrpo.rewards.core`); this says once, after the same number of steps in a row,
that nothing trains, naming the functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn

from infgrpo.rewards.config import RewardConfig
from infgrpo.settings import InfgrpoWarning
from infgrpo.training.optim import OptimizerConfig

ENTROPY_BELOW = 1e-3
"""Mean token entropy (nats) under which a step's policy counts as deterministic."""
STEPS = 3
"""Collapsed steps in a row before the warning."""


def collapsed(metrics: dict[str, float], entropy_below: float = ENTROPY_BELOW) -> bool:
    """Whether one step's metrics (:func:`~infgrpo.training.metrics.step_metrics`) look collapsed: mean token
    ``entropy`` under ``entropy_below`` and no group with a reward spread (``frac_reward_zero_std`` 1). False
    when either metric is missing."""
    entropy, zero_std = metrics.get("entropy"), metrics.get("frac_reward_zero_std")
    return entropy is not None and zero_std is not None and entropy < entropy_below and zero_std >= 1.0


def collapse_message(run: list[tuple[int, dict[str, float]]], optimizer: OptimizerConfig) -> str:
    """The warning for ``run``: (step, metrics) of the collapsed steps in a row, oldest first."""
    first, last = run[0][0], run[-1][0]
    entropy = max(m["entropy"] for _, m in run)
    reward = ", ".join(f"{m.get('reward', float('nan')):.3g}" for _, m in run)
    truncated = ", ".join(f"{m.get('completions_truncated', float('nan')):.2f}" for _, m in run)
    clip = "" if optimizer.max_grad_norm else "; model.optimizer.max_grad_norm=0 leaves the gradient unclipped"
    return (
        f"[infgrpo] the policy looks collapsed: steps {first}-{last} had mean token entropy <= {entropy:.2g} and no "
        f"group with a reward spread (frac_reward_zero_std 1; reward {reward}; share of completions cut at "
        f"max_new_tokens {truncated}), so every advantage and the loss are 0 and nothing trains. Unless every prompt "
        f"is solved, an update went too far: model.optimizer.learning_rate={optimizer.learning_rate:g} is likely "
        f"too high (lower it, e.g. to {optimizer.learning_rate / 10:g}){clip}. The update of step {first - 1} or "
        f"an earlier one did it: restart from a checkpoint older than step {first - 1}."
    )


def unscorable(metrics: dict[str, Any]) -> bool:
    """Whether no completion of the step had a reward: the logged ``reward`` (the mean over scorable completions)
    is NaN. False when it is missing."""
    reward = metrics.get("reward")
    return reward is not None and math.isnan(float(reward))


def unscorable_message(first: int, last: int, rewards: RewardConfig | None) -> str:
    """The warning for steps ``first``-``last`` in which every completion was unscorable under ``rewards``."""
    names = ", ".join(rewards.functions) if rewards is not None else "the reward functions"
    return (
        f"[infgrpo] no completion had a reward in steps {first}-{last}: every reward function ({names}) returned "
        "None (does not apply) or failed for every completion, so every completion is left out (reward NaN, "
        "advantage 0), the loss is 0 and nothing trains. Give the rows a reward that applies to them; with "
        "model.rewards.on_error skip, run with --model.rewards.on_error raise to see the first failure (a column a "
        "reward needs, an exception it raises)."
    )


@dataclass
class CollapseWatch:
    """Counts collapsed steps in a row (:func:`collapsed`) and warns once, on rank zero, at ``steps`` of them."""

    optimizer: OptimizerConfig
    """The run's optimizer settings (the warning names the learning rate and clipping)."""
    rewards: RewardConfig | None = None
    """The run's reward settings (the unscorable warning names the functions)."""
    steps: int = STEPS
    entropy_below: float = ENTROPY_BELOW
    run: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    """(step, metrics) of the collapsed steps in a row so far."""
    warned: bool = False
    unscorable_steps: list[int] = field(default_factory=list)
    """The steps in a row so far in which no completion had a reward."""
    warned_unscorable: bool = False

    def observe(self, metrics: dict[str, float], step: int) -> str | None:
        """Takes one step's metrics; returns the warning's text the first time ``steps`` steps in a row collapsed,
        else None."""
        if not collapsed(metrics, self.entropy_below):
            self.run = []
            return None
        self.run = [*self.run, (step, metrics)][-self.steps :]
        if self.warned or len(self.run) < self.steps:
            return None
        self.warned = True
        return collapse_message(self.run, self.optimizer)

    def observe_unscorable(self, metrics: dict[str, float], step: int) -> str | None:
        """Takes one step's metrics; returns the unscorable warning's text the first time ``steps`` steps in a row
        scored no completion (:func:`unscorable`), else None."""
        if not unscorable(metrics):
            self.unscorable_steps = []
            return None
        self.unscorable_steps = [*self.unscorable_steps, step][-self.steps :]
        if self.warned_unscorable or len(self.unscorable_steps) < self.steps:
            return None
        self.warned_unscorable = True
        return unscorable_message(self.unscorable_steps[0], step, self.rewards)

    def __call__(self, metrics: dict[str, float], step: int) -> None:
        """:meth:`observe` and :meth:`observe_unscorable`, warning on rank zero when either fires."""
        for message in (self.observe(metrics, step), self.observe_unscorable(metrics, step)):
            if message is not None:
                rank_zero_warn(message, category=InfgrpoWarning)
