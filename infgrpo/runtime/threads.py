"""CPU threads for torch: as many as the work can use and the cores that are actually free.

Why: torch's intra-op pool (OpenMP) makes every thread of an operation wait at a barrier for the
others, spinning first. With more threads than free cores, one of them is descheduled behind another
process, and every small operation of a decode step waits a scheduler time slice for it: on a 2-core
machine with one core kept busy, the tiny default decoded 28x slower with torch's default 2 threads
than with 1 (``python -m benchmarks busy-cpu`` in a checkout measures it). Small models gain nothing from a
second thread anyway: their matrices are too small to split.

``threads: auto`` (the default) therefore decides before each rollout and each update::

    threads = clamp(work / WORK_PER_THREAD, 1, free cores)

with ``work`` = parameters x rows (rows = sequences decoded at once, or tokens of an update
micro-batch), and free cores = cores this process may use (affinity, cgroup quota, ``OMP_NUM_THREADS``)
minus the cores other processes kept busy since the last decision (from ``/proc/stat``, our own CPU
time subtracted). An integer fixes the count (what torch.set_num_threads would do; e.g. for bit-identical
runs across machines, since a reduction split over another number of threads may round differently).

    from infgrpo.runtime.threads import set_threads, adapt_threads
    set_threads("auto")                      # process-wide; also INFGRPO_THREADS=auto|N
    adapt_threads(model, rows=32)            # called by the sampler and GRPOModule; returns the count
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Literal

import torch

Threads = int | Literal["auto"]

WORK_PER_THREAD = 100_000_000
"""Multiply-accumulates of one forward (parameters x rows) that keep one more thread busy enough to
pay for its barriers. The tiny default (0.6M parameters) decodes on one thread (1 thread was faster
than 2 on a quiet machine); its updates (4,096 tokens) and the decode steps of models of ~50M
parameters and up may use every free core."""

BUSY_SLACK = 0.25
"""Cores another process may keep busy on average before one core counts as taken (background noise)."""

FIRST_WINDOW_S = 0.1
"""The first decision measures the other processes' load over this long a window."""


def check_threads(threads: Threads | str, field: str = "threads") -> Threads:
    """``threads`` as 'auto' or an integer >= 1; a ValueError naming ``field``, the value and what is valid."""
    if isinstance(threads, str) and threads.strip().lower() == "auto":
        return "auto"
    try:
        n = int(threads)
    except (TypeError, ValueError):
        n = 0
    if isinstance(threads, bool) or n < 1 or (isinstance(threads, float) and threads != n):
        raise ValueError(f"{field}={threads!r} is not valid; use 'auto' or an integer >= 1 (torch CPU threads)")
    return n


def usable_cores() -> int:
    """CPU cores this process may run on: its affinity, a cgroup (v2) CPU quota, and ``OMP_NUM_THREADS``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) >= 1:
        cores = min(cores, int(omp))
    return max(1, cores)


@dataclass(frozen=True)
class CpuSample:
    """Machine-wide busy CPU seconds (all cores), this process's CPU seconds, and the wall clock."""

    busy_s: float
    own_s: float
    wall_s: float


def read_cpu_sample() -> CpuSample | None:
    """The current :class:`CpuSample`, or None where ``/proc/stat`` is not readable (not Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal (guest time is already inside user)
    busy_ticks = sum(fields[:8]) - fields[3] - fields[4]
    times = os.times()
    return CpuSample(busy_ticks / os.sysconf("SC_CLK_TCK"), times.user + times.system, time.monotonic())


def others_busy_cores(before: CpuSample, after: CpuSample) -> float:
    """Average cores kept busy by *other* processes between two samples (>= 0)."""
    wall = after.wall_s - before.wall_s
    if wall <= 0:
        return 0.0
    return max(0.0, ((after.busy_s - before.busy_s) - (after.own_s - before.own_s)) / wall)


def choose_threads(setting: Threads, cores: int, others_busy: float, work: float) -> int:
    """The thread count for ``work`` multiply-accumulates per forward (a pure function).

    Args:
        setting: 'auto' or a fixed integer (returned as it is).
        cores: cores this process may use (:func:`usable_cores`).
        others_busy: average cores other processes keep busy (:func:`others_busy_cores`).
        work: parameters x rows of the forward passes about to run.
    """
    if setting != "auto":
        return int(setting)
    taken = max(0, math.ceil(others_busy - BUSY_SLACK))
    free = max(1, cores - taken)
    wanted = max(1, int(work // WORK_PER_THREAD))
    return min(free, wanted)


class ThreadGovernor:
    """Applies :func:`choose_threads` to torch, measuring the other processes' load between decisions."""

    def __init__(self, setting: Threads = "auto") -> None:
        self.setting: Threads = check_threads(setting)
        self.last: CpuSample | None = None
        self.others_busy = 0.0

    def adapt(self, model: torch.nn.Module | None, rows: int) -> int:
        """Sets torch's intra-op threads for ``rows`` rows through ``model``; returns the count."""
        if self.setting == "auto":
            now = read_cpu_sample()
            if now is not None and self.last is None:  # first decision: look at a short window
                time.sleep(FIRST_WINDOW_S)
                self.last, now = now, read_cpu_sample()
            if now is not None and self.last is not None:
                self.others_busy = others_busy_cores(self.last, now)
            self.last = now
        params = sum(p.numel() for p in model.parameters()) if model is not None else 0
        n = choose_threads(self.setting, usable_cores(), self.others_busy, params * max(rows, 1))
        if n != torch.get_num_threads():
            torch.set_num_threads(n)
        return n


_GOVERNOR = ThreadGovernor(os.environ.get("INFGRPO_THREADS", "auto"))


def set_threads(setting: Threads | str) -> None:
    """Sets the process-wide thread policy: 'auto' (see the module docstring) or a fixed count."""
    global _GOVERNOR
    _GOVERNOR = ThreadGovernor(check_threads(setting))
    if _GOVERNOR.setting != "auto":
        torch.set_num_threads(int(_GOVERNOR.setting))


def adapt_threads(model: torch.nn.Module | None, rows: int) -> int:
    """Sets torch's threads for the next forward passes of ``rows`` rows through ``model`` (module docstring)."""
    return _GOVERNOR.adapt(model, rows)
