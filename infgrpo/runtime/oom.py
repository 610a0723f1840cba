"""Out of device memory: free what torch caches, then try again with half the work.

Three places shrink their work when a CUDA allocation fails, and share :func:`retry_on_oom`:
the rollout halves its slots (:class:`~infgrpo.MicroGroupSampler`; also when warming up or capturing
the decode step's CUDA graph runs out, which raises this error too and leaves the allocator able to
free its cache, :mod:`~infgrpo.sampler.engine.graph_capture`), the update re-packs its
micro-batches at half the token budget before the frozen log-probs, and splits every micro-batch in
two during an optimizer step (:class:`~infgrpo.update.runner.PolicyUpdate`). Each passes a
``shrink`` that says what half means for it, and raises when halving cannot help.

    result, slots, retries = retry_on_oom(lambda n: decode(n), 16, halve_slots)
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TypeVar

import torch

S = TypeVar("S")
T = TypeVar("T")


def free_cached() -> None:
    """Collects garbage and returns the CUDA allocator's unused cached blocks to the device."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def first_line(message: str) -> str:
    """The first line of an out-of-memory message (CUDA's are long), or ``"out of memory"``."""
    return message.splitlines()[0] if message else "out of memory"


def retry_on_oom(attempt: Callable[[S], T], state: S, shrink: Callable[[S, str], S]) -> tuple[T, S, int]:
    """``attempt(state)``; on ``torch.OutOfMemoryError`` ``state = shrink(state, message)`` and again.

    ``shrink`` returns the smaller state (it may release what the failed attempt held) or raises an
    error that says what to change. Returns the result, the state that worked and the number of retries.
    """
    retries = 0
    while True:
        try:
            return attempt(state), state, retries
        except torch.OutOfMemoryError as err:
            message = str(err)
        # outside the except block: the traceback's frames (and the tensors they hold) are released
        state = shrink(state, message)
        free_cached()
        retries += 1
