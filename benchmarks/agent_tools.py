"""The calculator tool of ``bench agent``, with a latency the benchmark sets: ``benchmarks.agent_tools:add``.

Both trainers call the same function object: infgrpo by its import path (``agent.tools``), TRL as ``tools=[add]``.
:data:`LATENCY` is set by the benchmark before a rollout: every call sleeps ``base_s``, and a call whose operands sum
to a multiple of ``every`` sleeps ``slow_s`` more (about one call in ``every``, the same calls in both trainers).
"""

from __future__ import annotations

import threading
import time

LATENCY = {"base_s": 0.0, "slow_s": 0.0, "every": 4}
"""Seconds every call sleeps, seconds the slow calls sleep more, and which calls are slow (sum % every == 0)."""
CALLS = {"n": 0, "slow": 0}
"""Calls made since the last :func:`reset` (and the slow ones among them)."""
_LOCK = threading.Lock()


def add(a: int, b: int) -> int:
    """Adds two integers.

    Args:
        a: the first integer.
        b: the second integer.
    """
    slow = (a + b) % LATENCY["every"] == 0
    with _LOCK:
        CALLS["n"] += 1
        CALLS["slow"] += int(slow)
    time.sleep(LATENCY["base_s"] + (LATENCY["slow_s"] if slow else 0.0))
    return a + b


def reset(base_s: float = 0.0, slow_s: float = 0.0, every: int = 4) -> None:
    """Sets the latency and zeroes the counts."""
    LATENCY.update(base_s=base_s, slow_s=slow_s, every=every)
    CALLS.update(n=0, slow=0)


class Dealt:
    """An environment for ``--observations per-sample``: each instance's ``reset`` deals its own held-out sum from one
    shared stream (:data:`DEAL`, seeded by the benchmark), so the samples of a row get different observations (TRL's
    "a game dealt at random"); its ``add`` is :func:`add`, with the benchmark's latency."""

    def reset(self, **row: object) -> str:
        """Deals a held-out sum; the observation is its question (the prompt's user message)."""
        return DEAL["rng"].choice(DEAL["questions"])

    def add(self, a: int, b: int) -> int:
        """Adds two integers.

        Args:
            a: the first integer.
            b: the second integer.
        """
        return add(a, b)


DEAL: dict = {"rng": None, "questions": []}
"""What :class:`Dealt` deals from: a ``random.Random`` and the questions (``"a+b?"``)."""


def deal(seed: int, questions: list[str]) -> None:
    """:class:`Dealt` deals ``questions`` from a stream seeded with ``seed`` from now on."""
    import random

    DEAL.update(rng=random.Random(seed), questions=list(questions))
