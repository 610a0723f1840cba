"""Capturing the decode step as a CUDA graph so that a failure leaves nothing behind, and what failed, kept.

    graph = capture_graph(step.forward, step.kernels, GraphRuntime())  # a CUDAGraph, or raises what failed
    failures = CaptureFailures()                                       # kept by the pool keeper between steps
    failures.remember(key, "RuntimeError: operation not permitted when stream is capturing")

:func:`capture_graph` warms the step up twice on a side stream, then captures it on that stream into
a memory pool of its own. However it ends:

- the current stream is the one it started on. ``torch.cuda.graph`` does not guarantee this: its
  ``__exit__`` calls ``capture_end()`` before it restores the stream, so a ``capture_end`` that raises
  leaves the capture stream current for the rest of the process;
- a capture that began is ended, also when the captured code raised (CUDA otherwise keeps the
  stream capturing);
- the caching allocator no longer routes allocations to the failed capture's pool, and the pool is
  released. ``CUDAGraph.capture_end`` raises before it tells the allocator the capture ended, and while
  the allocator believes a capture is under way it stops recycling cross-stream blocks and its
  ``empty_cache`` fails an internal assert, which :func:`~infgrpo.runtime.oom.free_cached` calls before
  every out-of-memory retry;
- the side stream's work is ordered before the current stream's next work.

What failed is raised unchanged: an out-of-memory error stays ``torch.OutOfMemoryError``, so the
rollout's slot-halving retry (:func:`~infgrpo.runtime.oom.retry_on_oom`) sees it.

The CUDA calls go through one :class:`GraphRuntime` object, so a CPU test can stand in a fake device
for it and drive this module's failure paths for real.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from typing import Any

import torch

MAX_REMEMBERED = 8
"""Most failed captures :class:`CaptureFailures` keeps (the oldest is dropped first)."""


class GraphRuntime:
    """The CUDA calls a capture makes, on the current CUDA device."""

    def side_stream(self) -> Any:
        """A new stream for the warm-up and the capture (a capture may not run on the default stream)."""
        return torch.cuda.Stream()

    def current_stream(self) -> Any:
        """The stream work goes to now."""
        return torch.cuda.current_stream()

    def use_stream(self, stream: Any) -> contextlib.AbstractContextManager:
        """Makes ``stream`` current inside the block; the previous one is current again after it, however it ends."""
        return torch.cuda.stream(stream)

    def new_graph(self) -> Any:
        """An empty ``torch.cuda.CUDAGraph``."""
        return torch.cuda.CUDAGraph()

    def new_pool(self) -> Any:
        """A memory pool id for one capture (known to the caller, so a failed capture's pool can be ended)."""
        return torch.cuda.graph_pool_handle()

    def synchronize(self) -> None:
        """Waits for all work on the device."""
        torch.cuda.synchronize()

    def end_pool(self, graph: Any, pool: Any) -> None:
        """After a failed capture: the allocator stops routing allocations to ``pool`` and releases it.

        Each call may find its work already done (``capture_end`` got as far as ending the pool, or the
        capture never began); those refusals are expected and ignored. A graph whose capture ended
        owns its pool and releases it when it is freed.
        """
        device = torch.cuda.current_device()
        end = getattr(torch._C, "_cuda_endAllocateToPool", None) or getattr(
            torch._C, "_cuda_endAllocateCurrentStreamToPool", None
        )
        if end is not None:
            with contextlib.suppress(RuntimeError):
                end(device, pool)
        try:
            graph.pool()  # raises unless the capture ended
            return
        except RuntimeError:
            pass
        release = getattr(torch._C, "_cuda_releasePool", None)
        if release is not None:
            with contextlib.suppress(RuntimeError):
                release(device, pool)


def capture_graph(
    forward: Callable[[], None],
    kernels: Callable[[], contextlib.AbstractContextManager],
    runtime: GraphRuntime,
    warmups: int = 2,
) -> Any:
    """``forward`` warmed up ``warmups`` times on a side stream, then captured there; returns the graph.

    ``kernels()`` is entered around each call (the pinned attention kernel). Raises what failed,
    unchanged, after undoing what the capture had begun (see the module docstring).
    """
    current = runtime.current_stream()
    side = runtime.side_stream()
    side.wait_stream(current)
    graph = pool = None
    try:
        with runtime.use_stream(side):
            with kernels():
                for _ in range(warmups):
                    forward()
            graph, pool = runtime.new_graph(), runtime.new_pool()
            runtime.synchronize()  # the warm-up's memory is settled before the graph's pool takes any
            graph.capture_begin(pool=pool)
            try:
                with kernels():
                    forward()
            except BaseException:
                with contextlib.suppress(Exception):  # ends the (now invalid) capture; its error says less
                    graph.capture_end()
                raise
            graph.capture_end()
    except BaseException:
        if graph is not None:
            runtime.end_pool(graph, pool)
        current.wait_stream(side)
        runtime.synchronize()  # nothing the failed attempt queued still runs when its memory is reused
        raise
    current.wait_stream(side)  # the warm-up's K/V writes come before the first replay
    return graph


class CaptureFailures:
    """Why captures failed, by what a capture depends on (the model's fingerprint and the step's settings).

    Kept by the :class:`~infgrpo.sampler.engine.pool_keeper.PoolKeeper`, so a decode step rebuilt for the next
    rollout (``keep_pool: false``, another slot count) does not try a capture that already failed.
    Holds at most :data:`MAX_REMEMBERED` entries.
    """

    def __init__(self) -> None:
        self.reasons: dict[Hashable, str] = {}

    def reason(self, key: Hashable) -> str | None:
        """The one-line reason the capture of ``key`` failed, or None if it has not failed."""
        return self.reasons.get(key)

    def remember(self, key: Hashable, reason: str) -> None:
        """Records that capturing ``key`` failed, and why."""
        self.reasons.pop(key, None)
        self.reasons[key] = reason
        while len(self.reasons) > MAX_REMEMBERED:
            del self.reasons[next(iter(self.reasons))]


def is_memory_error(err: BaseException) -> bool:
    """Whether ``err`` means the device ran out of memory (PyTorch's error, or CUDA's or cuBLAS's own words)."""
    text = str(err)
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in text or "ALLOC_FAILED" in text


def one_line(err: BaseException, limit: int = 200) -> str:
    """``Type: first line of the message``, at most ``limit`` characters."""
    lines = str(err).strip().splitlines()
    text = f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
