"""Refill policies: which waiting sequence takes a slot that just became free.

A policy is ``pick(waiting: list[Sequence]) -> int`` (an index into ``waiting``), chosen by name
(``SamplerConfig.refill``). The choice changes the order of work only: each sequence's tokens come
from its own random stream, so every policy yields the same completions.
"""

from __future__ import annotations

from infgrpo.registry import Registry
from infgrpo.sampler.sequence import Sequence

REFILL_POLICIES = Registry("refill")


@REFILL_POLICIES.register("fifo")
def fifo(waiting: list[Sequence]) -> int:
    """First come, first served: prompt-major order."""
    return 0
