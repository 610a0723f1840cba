"""Memory budgets and memory by phase: what the sampler, the update and the module share.

Budgets (``rollout_memory``, ``update_memory``) are bytes or a share of the memory free now::

    parse_memory("8GB", "update_memory")         # 8_000_000_000
    budget_bytes(0.5, torch.device("cpu"))        # half of MemAvailable

Phases of a training step (rollout, update), so a user sees where memory goes::

    phases = PhaseMemory()
    with phases.phase("rollout", device):
        ...
    phases.metrics()  # CUDA: {"memory/rollout_peak_gb": .., "memory/update_peak_gb": .., "memory/reserved_gb": ..}

On CUDA each phase resets the allocator's peak statistics at its start, so a phase's peak is its
own (``torch.cuda.max_memory_allocated``) and ``reserved_gb`` is the most the allocator held in
either phase. On other devices only the time window of each phase is kept (``windows``: the
benchmarks take CPU resident-memory peaks within them).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator

import torch

from infgrpo.runtime.host_memory import release_host_memory
from infgrpo.settings import ConfigError

GB = 1e9
UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


def parse_memory(value: int | float | str, field: str) -> int | float:
    """A validated memory budget: bytes (int) or a share of free memory (float in (0, 1]).

    Strings give bytes with a unit (``"4GB"``, ``"512MiB"``) or a plain number; a float above 1
    with no fractional part (``4e9``) is read as bytes. ``field`` names the setting in errors
    (``rollout_memory``, ``update_memory``).
    """
    valid = "bytes (an integer >= 1, or a string such as '4GB', '512MiB') or a float in (0, 1] (share of free memory)"
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?(?:[eE]\d+)?)\s*([a-zA-Z]*)\s*", value)
        if m is None or m.group(2).lower() not in UNITS:
            raise ConfigError(f"{field}={value!r} is not understood; valid: {valid}")
        number, unit = m.group(1), m.group(2).lower()
        if unit:
            value = int(float(number) * UNITS[unit])
        else:
            value = int(number) if number.isdigit() else float(number)
    if isinstance(value, float) and value > 1 and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{field}={value!r} is not understood; valid: {valid}")
    if (isinstance(value, float) and not 0.0 < value <= 1.0) or (isinstance(value, int) and value < 1):
        raise ConfigError(f"{field}={value!r} is out of range; valid: {valid}")
    return value


def free_memory(device: torch.device) -> int:
    """Bytes free on ``device`` now: the CUDA allocator's view of the GPU, or available system memory."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil
    except ImportError as err:
        raise ValueError(
            "a memory budget given as a fraction needs the free memory, which this system does not report; give bytes"
        ) from err
    return int(psutil.virtual_memory().available)


def budget_bytes(memory: int | float | str, device: torch.device, field: str = "rollout_memory") -> int:
    """The budget in bytes: ``memory`` itself, or its share of :func:`free_memory` on ``device``."""
    value = parse_memory(memory, field)
    return value if isinstance(value, int) else int(value * free_memory(device))


class PhaseMemory:
    """Per-phase peaks (CUDA) and ``time.perf_counter`` windows (every device) of the latest step."""

    def __init__(self, release_host: bool = True) -> None:
        self.release_host = release_host
        self.windows: dict[str, tuple[float, float]] = {}
        self.start_allocated: dict[str, int] = {}
        self.peak_allocated: dict[str, int] = {}
        self.peak_reserved: dict[str, int] = {}
        self._started: dict[str, float] = {}

    def start(self, phase: str, device: torch.device) -> None:
        """Marks the start of ``phase``; on CUDA resets the allocator's peaks."""
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            self.start_allocated[phase] = torch.cuda.memory_allocated(device)
        self._started[phase] = time.perf_counter()

    def end(self, phase: str, device: torch.device) -> None:
        """Marks the end of ``phase``; on CUDA records its allocated and reserved peaks, on CPU hands the
        phase's freed heap back to the system (:func:`~infgrpo.runtime.host_memory.release_host_memory`,
        unless ``release_host`` is off), within the phase's time."""
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            self.peak_allocated[phase] = torch.cuda.max_memory_allocated(device)
            self.peak_reserved[phase] = torch.cuda.max_memory_reserved(device)
        elif device.type == "cpu" and self.release_host:
            release_host_memory()
        self.windows[phase] = (self._started.pop(phase, time.perf_counter()), time.perf_counter())

    @contextlib.contextmanager
    def phase(self, phase: str, device: torch.device) -> Iterator[None]:
        """``start`` on entry and ``end`` on a normal exit (a failed phase records nothing)."""
        self.start(phase, device)
        yield
        self.end(phase, device)

    def seconds(self, phase: str) -> float:
        """Wall time of the latest ``phase`` (its window's length)."""
        start, end = self.windows[phase]
        return end - start

    def rise(self, phase: str) -> int | None:
        """Bytes the CUDA allocator's peak rose above its level at the start of ``phase`` (None off CUDA)."""
        if phase not in self.peak_allocated:
            return None
        return self.peak_allocated[phase] - self.start_allocated[phase]

    def metrics(self) -> dict[str, float]:
        """``memory/<phase>_peak_gb`` per phase and ``memory/reserved_gb`` (CUDA only; empty elsewhere)."""
        out = {f"memory/{phase}_peak_gb": peak / GB for phase, peak in self.peak_allocated.items()}
        if self.peak_reserved:
            out["memory/reserved_gb"] = max(self.peak_reserved.values()) / GB
        return out
