"""A policy that collapsed warns once: entropy near 0 and no reward spread, several steps in a row.

    watch = CollapseWatch(settings.optimizer)
    watch(metrics, trainer.global_step)     # after each step's metrics; rank zero warns the first time it fires

A learning rate far too high (``learning_rate: 10`` on the tiny model) can collapse the policy in one update
while every number stays finite: from then on each prompt's completions are one and the same (mean token
entropy 0, every completion cut at ``max_new_tokens``), every group's rewards are equal
(``frac_reward_zero_std`` 1), the advantages and the loss are 0, and nothing can move the policy again.
:class:`~infgrpo.training.divergence.DivergenceError` is for non-finite values; this is a warning, since a
policy that solved every prompt also has equal rewards and may have a low entropy: the text gives the numbers
so that the reader can tell which. The entropy is the update's mean over the tokens of the rows it ran (with
``update.skip_zero_advantage`` and no reward spread: one row).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lightning.pytorch.utilities import rank_zero_warn

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


@dataclass
class CollapseWatch:
    """Counts collapsed steps in a row (:func:`collapsed`) and warns once, on rank zero, at ``steps`` of them."""

    optimizer: OptimizerConfig
    """The run's optimizer settings (the warning names the learning rate and clipping)."""
    steps: int = STEPS
    entropy_below: float = ENTROPY_BELOW
    run: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    """(step, metrics) of the collapsed steps in a row so far."""
    warned: bool = False

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

    def __call__(self, metrics: dict[str, float], step: int) -> None:
        """:meth:`observe`, warning on rank zero when it fires."""
        message = self.observe(metrics, step)
        if message is not None:
            rank_zero_warn(message)
