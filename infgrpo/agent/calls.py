"""One turn's tool calls run, in TRL 1.16's order, with its message contents and counts (``_tool_call_loop``).

    workers = ToolWorkers(threads=8, timeout=60.0)   # agent.tool_workers, agent.tool_timeout
    result = workers.run(message["tool_calls"], box)  # on a worker thread: run_calls with the workers' loop
    result.messages      # [{"role": "tool", "name": "add", "content": "5"}, ...]: sync results, then async ones
    result.calls, result.failures, result.timeouts

The sync tools run one after another in call order, then the turn's async tools run gathered on ``loop`` (an event
loop running in another thread, :class:`ToolWorkers`). So the messages hold every sync result in call order,
then every async result in call order, as TRL writes them. A result becomes ``str(result)`` (a list is kept: content
blocks). A call that raises, an unknown name (``Tool X not found.``) or a call whose type is not ``function``
becomes ``{"error": "..."}``, whose ``str()`` is the Python repr, as in TRL, and counts as a failure. Every call
counts, failed or not.

What TRL does not guard against, and we do:

- A tool that raises ``SystemExit`` (``sys.exit(3)``) or ``KeyboardInterrupt`` fails like any other exception: its
  result is ``{"error": "SystemExit(3)"}``. In TRL the first ends the run with its exit code, the second stops it as
  Ctrl-C does. (``os._exit`` and a crash in native code end the process; nothing in-process can catch them.)
- A call that has not returned after ``timeout`` seconds (``agent.tool_timeout``) is abandoned: its result is
  ``{"error": "<tool> timed out after N s"}``, it counts as a failure and a timeout, and the sample goes on. A sync
  tool then keeps running on a daemon thread of its own, which nothing waits for (not even the interpreter's exit);
  an async one is cancelled. TRL waits forever.

Where tools run (:class:`ToolWorkers`) are daemon threads too: a hung tool never holds the process's exit, and
:func:`stop_tool_calls` (the second Ctrl-C, and the interpreter's exit) cancels the turns still queued, so none
starts after it.
"""

from __future__ import annotations

import asyncio
import atexit
import queue
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from infgrpo.agent.tools import ToolBox

T = TypeVar("T")

Outcome = Literal["ok", "none", "failed", "caught", "timeout"]
"""What one call gave: a result, ``None``, an exception (or an unknown name, a bad type), a ``SystemExit`` or
``KeyboardInterrupt`` caught, or no result within the timeout."""
CAUGHT = (SystemExit, KeyboardInterrupt)
"""What a tool raises that would end or stop the run in TRL; here the call's error."""


@dataclass
class CallResult:
    """What one turn's calls gave: the tool messages, in TRL's order, and the counts."""

    messages: list[dict[str, Any]]
    """``{"role": "tool", "name": ..., "content": ...}`` for every call."""
    calls: int
    """Calls made (every call of the turn)."""
    failures: int
    """Calls that raised (``SystemExit`` and ``KeyboardInterrupt`` included), named no known tool, were of an
    unsupported type or timed out."""
    timeouts: int = 0
    """Calls abandoned after ``agent.tool_timeout`` seconds (among ``failures``): their result is
    ``{"error": "<tool> timed out after N s"}``; a sync one's thread was left running, an async one cancelled."""
    outcomes: list[Outcome] = field(default_factory=list)
    """Each message's :data:`Outcome`, aligned with ``messages`` (what :class:`ToolTally` counts by tool)."""


@dataclass
class ToolTally:
    """Every call's outcome by tool name, since the last :meth:`ToolWorkers.take_tally` (what
    :class:`~infgrpo.agent.tool_watch.ToolWatch` reads)."""

    calls: Counter[str] = field(default_factory=Counter)
    outcomes: dict[Outcome, Counter[str]] = field(default_factory=dict)
    first: dict[tuple[Outcome, str], Any] = field(default_factory=dict)
    """The first content of each (outcome, tool) that is no result: the error the model read."""

    def add(self, result: CallResult) -> None:
        """Counts ``result``'s calls."""
        for message, outcome in zip(result.messages, result.outcomes, strict=True):
            name = message["name"]
            self.calls[name] += 1
            self.outcomes.setdefault(outcome, Counter())[name] += 1
            if outcome != "ok":
                self.first.setdefault((outcome, name), message["content"])

    def count(self, outcome: Outcome, name: str) -> int:
        """Calls of tool ``name`` that gave ``outcome``."""
        return self.outcomes.get(outcome, Counter())[name]


class _Abandoned:
    """The value of a call that did not return within the timeout."""


ABANDONED = _Abandoned()


def run_calls(
    tool_calls: list[dict[str, Any]],
    box: ToolBox,
    loop: asyncio.AbstractEventLoop | None,
    timeout: float | None = None,
) -> CallResult:
    """Runs the parsed ``tool_calls`` of one turn with the tools of ``box`` (see the module docstring); async ones
    on ``loop``, which must run in another thread (None: a loop of their own, in this thread). A call still running
    after ``timeout`` seconds is abandoned (None: waited for, as in TRL)."""
    results: list[tuple[str, Any, Outcome]] = []
    pending: list[tuple[str, Coroutine[Any, Any, Any]]] = []
    for call in tool_calls:
        if call.get("type") != "function":
            results.append(
                (call.get("name", "unknown"), {"error": f"Unsupported tool call type: {call.get('type')}"}, "failed")
            )
            continue
        name = call["function"]["name"]
        arguments = call["function"]["arguments"]
        if name in box.sync:
            results.append(_settled(name, _call_sync(box.sync[name], arguments, timeout, name), timeout))
        elif name in box.asynchronous:
            try:  # bad arguments raise here, when the coroutine is made, as in TRL
                pending.append((name, box.asynchronous[name](**arguments)))
            except Exception as err:  # noqa: BLE001 - a tool's failure is the model's to read, as in TRL
                results.append((name, {"error": str(err)}, "failed"))
        else:
            results.append((name, {"error": f"Tool {name} not found."}, "failed"))
    if pending:
        done = _gather([coro for _, coro in pending], loop, timeout)
        results += [_settled(name, value, timeout) for (name, _), value in zip(pending, done, strict=True)]
    messages = [
        {"role": "tool", "name": name, "content": value if isinstance(value, list) else str(value)}
        for name, value, _ in results
    ]
    outcomes = [outcome for _, _, outcome in results]
    failures = sum(outcome in ("failed", "caught", "timeout") for outcome in outcomes)
    return CallResult(messages, len(tool_calls), failures, outcomes.count("timeout"), outcomes)


def _settled(name: str, value: Any, timeout: float | None) -> tuple[str, Any, Outcome]:
    """(name, the value the message holds, its outcome) of a call that returned ``value`` (an exception: raised)."""
    if value is ABANDONED:
        return name, {"error": f"{name} timed out after {timeout:g} s"}, "timeout"
    if isinstance(value, CAUGHT):
        return name, {"error": repr(value)}, "caught"
    if isinstance(value, BaseException):
        return name, {"error": str(value)}, "failed"
    return name, value, "none" if value is None else "ok"


def _guarded(fn: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    """``fn(**arguments)``, or the exception it raised (``SystemExit`` and ``KeyboardInterrupt`` included)."""
    try:
        return fn(**arguments)
    except (Exception, *CAUGHT) as err:  # noqa: BLE001 - a tool's failure is the model's to read, as in TRL
        return err


def _call_sync(fn: Callable[..., Any], arguments: dict[str, Any], timeout: float | None, name: str) -> Any:
    """A sync tool's value (or exception); with a ``timeout``, run on a daemon thread of its own that is abandoned
    (:data:`ABANDONED`) when it has not returned in time: nothing joins it, so it cannot hold the process."""
    if timeout is None:
        return _guarded(fn, arguments)
    out: list[Any] = []
    done = threading.Event()

    def call() -> None:
        out.append(_guarded(fn, arguments))
        done.set()

    threading.Thread(target=call, name=f"infgrpo-tool-{name}", daemon=True).start()
    return out[0] if done.wait(timeout) else ABANDONED


def _gather(
    coros: list[Coroutine[Any, Any, Any]], loop: asyncio.AbstractEventLoop | None, timeout: float | None
) -> list[Any]:
    """The coroutines' results (an exception as its value, :data:`ABANDONED` for one cancelled after ``timeout``),
    gathered on ``loop`` from this thread."""

    async def one(coro: Coroutine[Any, Any, Any]) -> Any:
        async def guarded() -> Any:  # SystemExit / KeyboardInterrupt would escape the loop: caught inside the task
            try:
                return await coro
            except (Exception, *CAUGHT) as err:  # noqa: BLE001 - the model reads it
                return err

        task = asyncio.ensure_future(guarded())
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()  # not awaited: a coroutine that ignores the cancel is left behind, as a sync tool is
            return ABANDONED
        return task.result()

    async def gather() -> list[Any]:
        return list(await asyncio.gather(*(one(coro) for coro in coros)))

    if loop is None:
        return asyncio.run(gather())
    return asyncio.run_coroutine_threadsafe(gather(), loop).result()


_LIVE: weakref.WeakSet[ToolWorkers] = weakref.WeakSet()
"""Every open :class:`ToolWorkers` of the process (for :func:`stop_tool_calls`)."""


class ToolWorkers:
    """Where tools run, off the decoding thread: ``threads`` daemon worker threads, each running one sample's turn
    (its sync tools in call order), and one asyncio event loop in a daemon thread of its own, where the async tools
    of every sample run side by side while their workers wait. Made once and shared by rollouts; :meth:`close`
    ends both, :meth:`stop` without waiting.

    Unlike a ``ThreadPoolExecutor``, whose threads the interpreter joins at exit (running every queued call first),
    nothing waits for these threads: a hung tool cannot hold the process, and :meth:`stop` cancels the queued turns.
    ``timeout`` (``agent.tool_timeout``) bounds each call (None: unbounded)."""

    def __init__(self, threads: int = 8, timeout: float | None = None) -> None:
        self.timeout = timeout
        self.tally = ToolTally()
        """Every call's outcome since the last :meth:`take_tally`."""
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._stopped = False
        self._threads = [
            threading.Thread(target=self._work, name=f"infgrpo-tool-{i}", daemon=True) for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()
        self.loop = asyncio.new_event_loop()
        """The running loop (hand it to :func:`run_calls`)."""
        self._thread = threading.Thread(target=self.loop.run_forever, name="infgrpo-tools-loop", daemon=True)
        self._thread.start()
        _LIVE.add(self)

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` (or :meth:`close`) ran: new turns are cancelled at once."""
        return self._stopped

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """``fn(*args)`` on a worker thread; its future (cancelled at once after :meth:`stop`)."""
        future: Future[T] = Future()
        with self._lock:
            if self._stopped:
                future.cancel()
            else:
                self._queue.put((future, fn, args))
        return future

    def run(self, tool_calls: list[dict[str, Any]], box: ToolBox) -> CallResult:
        """:func:`run_calls` on this loop with this timeout (call it on a worker); its outcomes join the tally."""
        result = run_calls(tool_calls, box, self.loop, self.timeout)
        with self._lock:
            self.tally.add(result)
        return result

    def take_tally(self) -> ToolTally:
        """The outcomes since the last call, and a fresh tally."""
        with self._lock:
            tally, self.tally = self.tally, ToolTally()
        return tally

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as err:  # noqa: BLE001 - the future carries it to whoever waits
                future.set_exception(err)

    def stop(self) -> int:
        """Cancels the queued turns and ends the threads when their running turns end, without waiting for them (the
        loop keeps running for those turns' async tools: a daemon thread). Returns the turns cancelled."""
        with self._lock:
            if self._stopped:
                return 0
            self._stopped = True
            cancelled = 0
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None and item[0].cancel():
                    cancelled += 1
            for _ in self._threads:
                self._queue.put(None)
        _LIVE.discard(self)
        return cancelled

    def close(self) -> None:
        """:meth:`stop`, then waits for the running turns (each call bounded by ``timeout``), then stops the loop
        and its thread (pending coroutines are dropped)."""
        self.stop()
        for thread in self._threads:
            thread.join()
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
            self.loop.close()


def stop_tool_calls() -> int:
    """:meth:`ToolWorkers.stop` on every open one of the process: the queued tool turns are cancelled and the running
    ones left to end on their own (the second Ctrl-C; the interpreter's exit). Returns the turns cancelled."""
    return sum(workers.stop() for workers in list(_LIVE))


atexit.register(stop_tool_calls)  # daemon workers would otherwise start queued turns while the interpreter exits
