"""``async def`` reward functions run concurrently, as TRL 1.16 runs them, from any thread (Jupyter included).

    results = run_concurrently([lambda: fetch_score(a), lambda: fetch_score(b)])   # [value or exception, ...]

The coroutines run on one event loop in a daemon thread of their own, started on first use: ``asyncio.run``
would fail where a loop already runs (a notebook's), and one loop kept alive lets clients the functions hold
(HTTP sessions of a reward server) be reused between steps.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

_LOOP: asyncio.AbstractEventLoop | None = None
_LOCK = threading.Lock()


def reward_loop() -> asyncio.AbstractEventLoop:
    """The event loop of async rewards, running in its daemon thread (started once)."""
    global _LOOP
    with _LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="infgrpo-async-rewards", daemon=True).start()
            _LOOP = loop
    return _LOOP


def run_concurrently(calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Awaits every call's coroutine at once; returns each result, or the exception it raised, in order."""
    if not calls:
        return []

    async def gather() -> list[Any]:
        return await asyncio.gather(*(call() for call in calls), return_exceptions=True)

    return asyncio.run_coroutine_threadsafe(gather(), reward_loop()).result()
