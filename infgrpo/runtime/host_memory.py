"""Host memory a CPU run hands back between phases: garbage collection, then glibc's ``malloc_trim``.

    release_host_memory()     # after a rollout and after an update, on CPU (PhaseMemory does it)

On CPU, tensors live on the C heap (glibc ``malloc``). When a phase ends its tensors are freed, but
glibc keeps most of the freed pages mapped in the process: only free space at the very top of the
heap is returned on its own, and one live allocation above a hole pins it. So on a CPU the rollout's
and the update's working sets add up in the resident memory (RSS), although they never coexist: on
the SmolLM2 job of ``bench learn`` the update left ~1 GiB mapped and unused behind it.
``malloc_trim(0)`` returns every free page of the heap to the system (``madvise``), so the next
phase starts from what is live. The pages are faulted in again when the next phase needs them (a
fraction of a second a step on that job, measured in ``benchmarks/RESULTS.md``).

Not glibc (macOS, Windows, musl): nothing to call, and only the garbage is collected.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (size_t pad -> int), or None where the C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_host_memory() -> bool:
    """Collects the young garbage and returns the C heap's free pages to the system; whether glibc was asked to.

    Generations 0 and 1 only: the cycles a phase leaves are young. A full collection walks every object the process
    holds (over 500,000 with transformers loaded: 0.5 to 1.5 s a call on a busy 2-core machine, twice a step) and,
    on the tiny and the SmolLM2 fits, freed no object more and left the same resident memory after each step.
    """
    gc.collect(1)
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
