"""What a rollout found: dynamic sampling's counts, adaptive groups' and the tools' (``Rollouts.dynamic``,
``Rollouts.adaptive``, ``Rollouts.tools``).

    rollouts.dynamic.stats()        # {"dynamic/prompts_drawn": 7, ...}: this rank's counts
    rollouts.dynamic.reduce(ranks)  # the same keys, of the global batch (every rank calls it: a collective)
    rollouts.tools.reduce(ranks)    # {"tools/call_frequency": 0.4, ...}: TRL's tool metrics and ours

Each summary says how it combines over data-parallel ranks (:meth:`DynamicSummary.reduce`,
:meth:`AdaptiveSummary.reduce`, :meth:`ToolSummary.reduce`); the step's metrics (:mod:`infgrpo.training.metrics`)
log what they return.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from infgrpo.runtime.ranks import Ranks

OVER_RANKS = "over_ranks"
"""The key of a summary field's metadata that names how the field combines over ranks (default: summed)."""


def over_ranks(combine: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """A summary field that combines over ranks by ``combine`` of its (world,) column instead of the sum."""
    return field(metadata={OVER_RANKS: combine})


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

    def reduce(self, ranks: Ranks) -> dict[str, float]:
        """The ``dynamic/<field>`` statistics of the global batch, by name: the counts summed over ranks (one
        all-reduce), ``informative_rate`` over every rank's judged groups, ``capped`` the share of capped ranks."""
        stats = dict(sorted(self.stats().items()))
        sums = ranks.sum(torch.tensor([float(v) for v in stats.values()], dtype=torch.float64)).tolist()
        total = dict(zip(stats, sums, strict=True))
        judged = total["dynamic/groups_kept"] + total["dynamic/groups_dropped"]
        total["dynamic/informative_rate"] = total["dynamic/groups_kept"] / judged if judged else 0.0
        total["dynamic/capped"] = total["dynamic/capped"] / ranks.world_size
        return total


@dataclass
class AdaptiveSummary:
    """What adaptive groups did in a rollout (``Rollouts.adaptive``; also logged as ``adaptive/<field>``)."""

    samples_per_prompt_mean: float = over_ranks(torch.mean)
    samples_per_prompt_max: int = over_ranks(torch.max)
    groups_stalled: int
    """Groups without a spread at ``group_size``."""
    groups_extended: int
    groups_rescued: int
    """Stalled groups that found a spread by extension."""
    extension_samples: int
    """Samples beyond the first ``group_size`` of each prompt."""
    extension_tokens: int
    budget_used: float = over_ranks(torch.mean)
    """Samples fed / ``max_samples_per_step`` (averaged over ranks)."""
    cancelled_samples: int
    cancelled_tokens: int

    def stats(self) -> dict[str, Any]:
        """The counters as ``adaptive/<field>`` statistics."""
        return {f"adaptive/{k}": v for k, v in asdict(self).items()}

    def reduce(self, ranks: Ranks) -> dict[str, float]:
        """The ``adaptive/<field>`` statistics of the global batch, by name: every rank's fields in one gather, each
        combined as it says (:func:`over_ranks`: the mean samples per prompt and the budget used averaged, the most
        samples per prompt the largest), the others summed. A subclass's added fields take part."""
        columns = sorted(fields(self), key=lambda f: f.name)
        row = [float(getattr(self, f.name)) for f in columns]
        table = ranks.gather(torch.tensor([row], dtype=torch.float64))  # (world, fields)
        combine = [f.metadata.get(OVER_RANKS, torch.sum) for f in columns]
        return {f"adaptive/{f.name}": float(combine[j](table[:, j])) for j, f in enumerate(columns)}


@dataclass
class ToolSummary:
    """What a rollout's tools did (``Rollouts.tools``; with ``turns``, every rank has one, no call made included, so
    every rank reduces it). Counted over every sample the rollout ended, trained or not (dynamic sampling's dropped
    groups, adaptive groups' unpicked samples included)."""

    samples: int
    """Samples that ended (the denominator of the frequencies)."""
    calls: int
    """Tool calls run (every call of a turn that ran, failed or not; a rolled-back round's too, as in TRL)."""
    failures: int
    """Calls that failed: raised, named no known tool, were of another type than ``function``, or timed out."""
    timeouts: int
    """Calls abandoned when they ran past the tools' time limit (among the failures)."""
    rounds: int
    """Tool rounds: turns whose calls ran (one sample's each)."""
    wait_s: float
    """Seconds samples waited on their tools, summed over samples."""
    dropped: int
    """Tool results dropped as too long (TRL's rollback: past ``max_new_tokens`` or the context)."""
    steps_while_waiting: int = over_ranks(torch.max)
    """Decode steps run while at least one sample waited on its tools (the largest rank's)."""

    def reduce(self, ranks: Ranks) -> dict[str, float]:
        """The ``tools/*`` metrics of the global batch (one gather): TRL's ``tools/call_frequency`` (calls a sample)
        and ``tools/failure_frequency`` (failures a call; 0 without calls), and ours: ``tools/turns_mean`` (the model's
        turns a sample: 1 + its tool rounds), ``tools/timeouts`` (calls that timed out), ``tools/dropped`` (results
        rolled back as too long), ``tools/wait_s`` (summed over
        every rank's samples) and ``tools/steps_while_waiting`` (the largest rank's, as ``rollout/decode_steps``)."""
        columns = sorted(fields(self), key=lambda f: f.name)
        row = [float(getattr(self, f.name)) for f in columns]
        table = ranks.gather(torch.tensor([row], dtype=torch.float64))  # (world, fields)
        combine = [f.metadata.get(OVER_RANKS, torch.sum) for f in columns]
        total = {f.name: float(combine[j](table[:, j])) for j, f in enumerate(columns)}
        n, calls = max(total["samples"], 1.0), total["calls"]
        return {
            "tools/call_frequency": calls / n,
            "tools/failure_frequency": total["failures"] / calls if calls > 0 else 0.0,
            "tools/turns_mean": 1.0 + total["rounds"] / n,
            "tools/timeouts": total["timeouts"],
            "tools/wait_s": total["wait_s"],
            "tools/dropped": total["dropped"],
            "tools/steps_while_waiting": total["steps_while_waiting"],
        }
