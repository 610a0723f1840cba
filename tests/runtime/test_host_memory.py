"""release_host_memory: the pages of tensors freed in the middle of the C heap go back to the system.

Each check runs in a fresh interpreter: a heap with a test suite's history behind it keeps its own
free space, so what a trim returns there depends on the tests before.
"""

import json
import platform
import subprocess
import sys

GLIBC = platform.libc_ver()[0] == "glibc"

SCRIPT = """
import json, sys
import psutil, torch
from infgrpo.runtime.host_memory import release_host_memory
from infgrpo.runtime.memory import PhaseMemory

proc = psutil.Process()
release_host_memory()
# ~200 MiB of 64 KiB tensors (under glibc's mmap threshold: on the heap) freed between small live ones
kept, freed = [], []
phases = PhaseMemory(release_host=sys.argv[1] == "phase")
with phases.phase("update", torch.device("cpu")):
    for _ in range(3200):
        freed.append(torch.ones(16 * 1024))
        kept.append(torch.ones(16))
    del freed
    inside = proc.memory_info().rss
asked = release_host_memory() if sys.argv[1] == "call" else None
after = proc.memory_info().rss
print(json.dumps({"returned_mib": (inside - after) / 2**20, "asked": asked, "kept": len(kept)}))
"""


def run(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_freed_heap_pages_are_returned_to_the_system():
    called = run("call")  # release_host_memory() after a phase that does not release
    assert called["kept"] == 3200
    if GLIBC:
        assert called["asked"] is True and called["returned_mib"] > 100  # most of the ~200 MiB left mapped
    else:
        assert called["asked"] is False  # no malloc_trim: only garbage is collected


def test_a_cpu_phase_hands_its_freed_heap_back_when_it_ends_unless_told_not_to():
    phase, kept = run("phase"), run("keep")  # PhaseMemory(release_host=True), then =False
    if GLIBC:
        assert phase["returned_mib"] > 100
    assert kept["returned_mib"] < 20  # without the release the freed pages stay resident
