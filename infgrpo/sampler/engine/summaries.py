"""What a rollout found: dynamic sampling's counts and adaptive groups' (``Rollouts.dynamic``, ``Rollouts.adaptive``).

rollouts.dynamic.stats()        # {"dynamic/prompts_drawn": 7, ...}: this rank's counts
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class DynamicSummary:
    """What a dynamic rollout found (``Rollouts.dynamic``; also logged as ``dynamic/<field>``)."""

    prompts_drawn: int
    groups_kept: int
    groups_dropped: int
    groups_trained: int
    informative_rate: float
    """Kept / judged in this rollout."""
    dropped_tokens: int
    wasted_tokens: int
    """Tokens of cancelled sequences and of informative groups trimmed past the target."""
    capped: bool
    """Fewer informative groups than the target: the step also trains on dropped ones."""
    cancelled_sequences: int

    def stats(self) -> dict[str, Any]:
        """The counters as ``dynamic/<field>`` statistics (``capped`` as 0.0 / 1.0, a loggable number)."""
        return {f"dynamic/{k}": float(v) if isinstance(v, bool) else v for k, v in asdict(self).items()}


@dataclass
class AdaptiveSummary:
    """What adaptive groups did in a rollout (``Rollouts.adaptive``; also logged as ``adaptive/<field>``)."""

    samples_per_prompt_mean: float
    samples_per_prompt_max: int
    groups_stalled: int
    """Groups without a spread at ``group_size``."""
    groups_extended: int
    groups_rescued: int
    """Stalled groups that found a spread by extension."""
    extension_samples: int
    """Samples beyond the first ``group_size`` of each prompt."""
    extension_tokens: int
    budget_used: float
    """Samples fed / ``max_samples_per_step``."""
    cancelled_samples: int
    cancelled_tokens: int

    def stats(self) -> dict[str, Any]:
        """The counters as ``adaptive/<field>`` statistics."""
        return {f"adaptive/{k}": v for k, v in asdict(self).items()}
