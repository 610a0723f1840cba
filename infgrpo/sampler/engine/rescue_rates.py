"""Rescue rates: how often extending a stalled group found a reward spread, per reward level (adaptive groups' prior).

    rates = RescueRates()                       # the sampler keeps one across rollouts (checkpointed)
    a, b = rates.prior(level)                   # Beta(a, b) on the rate a new sample differs, Jeffreys' at first
    rescue_chance(n=8, k=8, a=a, b=b)           # P(8 more samples hold one that differs | 8 agreed)
    rates.observe(feed.grow.counts)             # after the rollout: {level: (samples drawn, extensions that found)}

The value rule of :mod:`infgrpo.sampler.engine.adaptive` ranks stalled groups by ``P_i(k) / (k * L_i)``, with
``P_i(k) = 1 - E[(1 - q)^k | n_i agree] = 1 - B(a, b + n_i + k) / B(a, b + n_i)`` under a Beta(a, b) prior on the
rate ``q`` at which a sample of the prompt differs from its stalled value. The prior is the rescue rate observed
for groups stalled at the same reward level (e.g. all wrong vs all right), ``a = s * r``, ``b = s * (1 - r)`` with
strength ``s`` = :data:`PRIOR_STRENGTH`. The sampler observes each rollout's counts once the rollout is over, like
dynamic sampling's :class:`~infgrpo.sampler.engine.dynamic.InformativeRate`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

PRIOR_STRENGTH = 2.0  # the prior's weight in samples: a weak prior, the prompt's own samples soon dominate


@dataclass
class RescueRates:
    """Per reward level, the samples drawn by extensions of stalled groups and the extensions that found a spread,
    as sums decaying by ``decay`` per rollout (the value rule's prior; checkpointed)."""

    drawn: dict[str, float] = field(default_factory=dict)
    found: dict[str, float] = field(default_factory=dict)
    decay: float = 0.8

    def prior(self, level: Hashable) -> tuple[float, float]:
        """Beta(a, b) on the rate a sample differs from a group stalled at ``level``: Jeffreys' before any data."""
        key = str(level)
        if self.drawn.get(key, 0.0) <= 0.0:
            return 0.5, 0.5
        rate = (self.found[key] + 0.5) / (self.drawn[key] + 1.0)
        return PRIOR_STRENGTH * rate, PRIOR_STRENGTH * (1.0 - rate)

    def observe(self, counts: dict[str, tuple[int, int]]) -> None:
        """One rollout's ``{level: (samples drawn by extensions, extensions that found a spread)}``."""
        for key in set(self.drawn) | set(counts):
            drawn, found = counts.get(key, (0, 0))
            self.drawn[key] = self.drawn.get(key, 0.0) * self.decay + drawn
            self.found[key] = self.found.get(key, 0.0) * self.decay + found

    def state_dict(self) -> dict[str, Any]:
        """The decayed sums."""
        return {"drawn": dict(self.drawn), "found": dict(self.found)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`."""
        self.drawn = {k: float(v) for k, v in state["drawn"].items()}
        self.found = {k: float(v) for k, v in state["found"].items()}


def log_beta(a: float, b: float) -> float:
    """log B(a, b)."""
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def rescue_chance(n: int, k: int, a: float, b: float) -> float:
    """``P(k)``: the chance that ``k`` more samples hold one that differs after ``n`` agreed, under Beta(a, b)."""
    return 1.0 - math.exp(log_beta(a, b + n + k) - log_beta(a, b + n))
