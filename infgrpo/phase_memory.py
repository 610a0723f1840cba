"""Memory and time by phase of a training step (rollout, update), so a user sees where memory goes.

    phases = PhaseMemory()
    phases.start("rollout", device); ...; phases.end("rollout", device)
    phases.metrics()  # CUDA: {"memory/rollout_peak_gb": .., "memory/update_peak_gb": .., "memory/reserved_gb": ..}

On CUDA each phase resets the allocator's peak statistics at its start, so a phase's peak is its
own (``torch.cuda.max_memory_allocated``) and ``reserved_gb`` is the most the allocator held in
either phase. On other devices only the time window of each phase is kept (``windows``: the
benchmarks take CPU resident-memory peaks within them).
"""

from __future__ import annotations

import time

import torch

GB = 1e9


class PhaseMemory:
    """Per-phase peaks (CUDA) and ``time.perf_counter`` windows (every device) of the latest step."""

    def __init__(self) -> None:
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
        """Marks the end of ``phase``; on CUDA records its allocated and reserved peaks."""
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            self.peak_allocated[phase] = torch.cuda.max_memory_allocated(device)
            self.peak_reserved[phase] = torch.cuda.max_memory_reserved(device)
        self.windows[phase] = (self._started.pop(phase, time.perf_counter()), time.perf_counter())

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
