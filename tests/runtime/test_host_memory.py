"""release_host_memory: the pages of tensors freed in the middle of the C heap go back to the system."""

import platform

import psutil
import torch

from infgrpo.runtime.host_memory import release_host_memory
from infgrpo.runtime.memory import PhaseMemory


def fragmented_heap() -> list[torch.Tensor]:
    """Frees ~200 MiB of 64 KiB tensors (heap-allocated: under glibc's mmap threshold) between small
    live ones, which pin the freed space inside the heap; returns the live ones."""
    kept, freed = [], []
    for _ in range(3200):
        freed.append(torch.ones(16 * 1024))  # 64 KiB, touched
        kept.append(torch.ones(16))
    del freed
    return kept


def test_freed_heap_pages_are_returned_to_the_system():
    proc = psutil.Process()
    kept = fragmented_heap()
    before = proc.memory_info().rss
    asked = release_host_memory()
    after = proc.memory_info().rss
    assert len(kept) == 3200
    if platform.libc_ver()[0] == "glibc":
        assert asked and before - after > 100 * 2**20  # most of the ~200 MiB left mapped
    else:
        assert not asked  # no malloc_trim: only garbage is collected


def test_a_cpu_phase_hands_its_freed_heap_back_when_it_ends_unless_told_not_to():
    proc = psutil.Process()
    for release, low in ((True, True), (False, False)):
        phases = PhaseMemory(release_host=release)
        with phases.phase("update", torch.device("cpu")):
            kept = fragmented_heap()
            inside = proc.memory_info().rss
        after = proc.memory_info().rss
        assert phases.seconds("update") > 0 and len(kept) == 3200
        if platform.libc_ver()[0] == "glibc":
            assert (inside - after > 100 * 2**20) == low
        release_host_memory()
