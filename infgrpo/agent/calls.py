"""One turn's tool calls run, in TRL 1.16's order, with its message contents and counts (``_tool_call_loop``).

    result = run_calls(message["tool_calls"], box, loop)
    result.messages      # [{"role": "tool", "name": "add", "content": "5"}, ...]: sync results, then async ones
    result.calls, result.failures

The sync tools run one after another in call order, then the turn's async tools run gathered on ``loop`` (an event
loop running in another thread, :class:`ToolWorkers`). So the messages hold every sync result in call order,
then every async result in call order, as TRL writes them. A result becomes ``str(result)`` (a list is kept: content
blocks). A call that raises, an unknown name (``Tool X not found.``) or a call whose type is not ``function``
becomes ``{"error": "..."}``, whose ``str()`` is the Python repr, as in TRL, and counts as a failure. Every call
counts, failed or not.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from infgrpo.agent.tools import ToolBox

T = TypeVar("T")


@dataclass
class CallResult:
    """What one turn's calls gave: the tool messages, in TRL's order, and the counts."""

    messages: list[dict[str, Any]]
    """``{"role": "tool", "name": ..., "content": ...}`` for every call."""
    calls: int
    """Calls made (every call of the turn)."""
    failures: int
    """Calls that raised, named no known tool or were of an unsupported type."""
    timeouts: int = 0
    """Calls abandoned when they ran past the tools' time limit (among the failures)."""


def run_calls(tool_calls: list[dict[str, Any]], box: ToolBox, loop: asyncio.AbstractEventLoop | None) -> CallResult:
    """Runs the parsed ``tool_calls`` of one turn with the tools of ``box`` (see the module docstring); async ones
    on ``loop``, which must run in another thread (None: a loop of their own, in this thread)."""
    results: list[tuple[str, Any]] = []
    pending: list[tuple[str, Coroutine[Any, Any, Any]]] = []
    failures = 0
    for call in tool_calls:
        if call.get("type") != "function":
            failures += 1
            results.append((call.get("name", "unknown"), {"error": f"Unsupported tool call type: {call.get('type')}"}))
            continue
        name = call["function"]["name"]
        try:
            if name in box.sync:
                results.append((name, box.sync[name](**call["function"]["arguments"])))
            elif name in box.asynchronous:
                pending.append(
                    (name, box.asynchronous[name](**call["function"]["arguments"]))
                )  # bad arguments raise here, as in TRL
            else:
                raise ValueError(f"Tool {name} not found.")
        except Exception as err:  # noqa: BLE001 - a tool's failure is the model's to read, as in TRL
            failures += 1
            results.append((name, {"error": str(err)}))
    if pending:
        done = _gather([coro for _, coro in pending], loop)
        for (name, _), value in zip(pending, done, strict=True):
            if isinstance(value, Exception):
                failures += 1
                value = {"error": str(value)}
            results.append((name, value))
    messages = [
        {"role": "tool", "name": name, "content": value if isinstance(value, list) else str(value)}
        for name, value in results
    ]
    return CallResult(messages, len(tool_calls), failures)


def _gather(coros: list[Coroutine[Any, Any, Any]], loop: asyncio.AbstractEventLoop | None) -> list[Any]:
    """The coroutines' results (an exception as its value), gathered on ``loop`` from this thread."""

    async def gather() -> list[Any]:
        return await asyncio.gather(*coros, return_exceptions=True)

    if loop is None:
        return asyncio.run(gather())
    return asyncio.run_coroutine_threadsafe(gather(), loop).result()


class ToolWorkers:
    """Where tools run, off the decoding thread: ``threads`` worker threads, each running one sample's turn (its
    sync tools in call order), and one asyncio event loop in a daemon thread of its own, where the async tools of
    every sample run side by side while their workers wait. Made once and shared by rollouts; :meth:`close` ends
    both."""

    def __init__(self, threads: int = 8) -> None:
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="infgrpo-tool")
        self.loop = asyncio.new_event_loop()
        """The running loop (hand it to :func:`run_calls`)."""
        self._thread = threading.Thread(target=self.loop.run_forever, name="infgrpo-tools-loop", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """``fn(*args)`` on a worker thread; its future."""
        return self.pool.submit(fn, *args)

    def close(self) -> None:
        """Waits for the running turns, then stops the loop and its thread (pending coroutines are dropped)."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
            self.loop.close()
