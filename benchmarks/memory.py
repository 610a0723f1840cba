"""Resident memory of a benchmark process: a polled timeline, its peak, and MiB for tables.

    with PeakRSS() as rss:                      # the rise of this process's RSS during the block
        run()
    rss.peak - rss.base                         # bytes

    timeline = RSSTimeline().__enter__()        # every sample kept, for rises within time windows
    ...; timeline.__exit__()
    timeline.rise(start, end)                   # (peak in [start, end] - level at start, that level)

Samples are taken every 2 ms by a daemon thread (``psutil``). On CPU this is the memory figure of
``bench rollout``, ``bench step`` and ``bench paper``; on CUDA they report the allocator's peaks beside it.
"""

from __future__ import annotations

import gc
import threading
import time

import psutil


class RSSTimeline:
    """Polls this process's resident memory in a thread, keeping (time, bytes) samples."""

    def __init__(self, interval: float = 0.002) -> None:
        self.proc, self.interval, self.samples = psutil.Process(), interval, []

    def __enter__(self) -> RSSTimeline:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.record(self.proc.memory_info().rss)
            time.sleep(self.interval)

    def record(self, rss: int) -> None:
        """Keeps one sample (the timeline keeps them all, with their time)."""
        self.samples.append((time.perf_counter(), rss))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.record(self.proc.memory_info().rss)

    def rise(self, start: float, end: float) -> tuple[int, int]:
        """(peak within [start, end] minus the level at ``start``, that level) in bytes."""
        before = [r for t, r in self.samples if t <= start]
        inside = [r for t, r in self.samples if start <= t <= end]
        base = before[-1] if before else (inside[0] if inside else 0)
        return max(inside, default=base) - base, base


class PeakRSS(RSSTimeline):
    """Polls this process's resident memory in a thread; ``peak - base`` is the rise during the block.

    Keeps only the peak: a list of samples would itself grow the memory it measures.
    """

    def __enter__(self) -> PeakRSS:
        gc.collect()
        self.base = self.peak = self.proc.memory_info().rss
        return super().__enter__()

    def record(self, rss: int) -> None:
        """Keeps the larger of the peak so far and ``rss``."""
        self.peak = max(self.peak, rss)


def mib(n: float) -> str:
    """``n`` bytes in MiB, with a thousands separator and one decimal."""
    return f"{n / 2**20:,.1f}"
