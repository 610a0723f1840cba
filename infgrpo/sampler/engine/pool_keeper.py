"""PoolKeeper: the one owner of the KV slot pool and its decode step, kept between rollouts.

    keeper = PoolKeeper()
    pool, step = keeper.get(model, num_slots=16, positions=longest_prompt + max_new_tokens, settings=settings)
    keeper.release()                            # frees both (SamplerConfig.keep_pool=False, or after an OOM)

A rollout asks for a pool of ``num_slots`` slots of at least ``positions`` positions. The kept pool
serves it when its slot count, K/V dtype and device are the ones asked for and its slots are long
enough (widths are rounded up to 128, :func:`~infgrpo.sampler.engine.slot_pool.pool_width`); otherwise the
old pool and step are released first, then a new pool allocated, so the two never coexist. The
step (and its CUDA graph) is reused while it belongs to that pool, that model and those settings,
and drops its graph when the model's storage or adapters changed (:meth:`DecodeStep.prepare`).
The keeper also holds the captures that failed (:class:`~infgrpo.sampler.engine.graph_capture.CaptureFailures`):
they outlive :meth:`release`, so a capture that failed is not tried again by the next step of
that model and those settings.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from infgrpo.runtime.oom import free_cached
from infgrpo.sampler.engine.decode_step import DecodeStep, StepSettings
from infgrpo.sampler.engine.graph_capture import CaptureFailures, GraphRuntime
from infgrpo.sampler.engine.slot_pool import SlotPool, pool_width
from infgrpo.sampler.model_support import kv_dtype


def same_device(a: torch.device, b: torch.device) -> bool:
    """Whether two devices are one (``cuda`` without an index means the current CUDA device)."""
    if a.type != b.type:
        return False
    if a.type != "cuda" or a.index == b.index:
        return True
    current = torch.cuda.current_device()
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


class PoolKeeper:
    """Holds one (:class:`SlotPool`, :class:`DecodeStep`) pair between rollouts; see the module docstring."""

    def __init__(self) -> None:
        self.pool: SlotPool | None = None
        self.step: DecodeStep | None = None
        self.allocations = 0
        """Pools allocated so far (tests and benchmarks read it)."""
        self.failures = CaptureFailures()
        """Captures that failed, kept across steps and releases."""
        self.runtime: GraphRuntime | None = None
        """The CUDA calls the steps' captures make (None: the step's default; a CPU test sets a fake)."""

    def get(
        self, model: PreTrainedModel, num_slots: int, positions: int, settings: StepSettings
    ) -> tuple[SlotPool, DecodeStep]:
        """A pool of ``num_slots`` slots of at least ``positions`` positions, and its step with every slot idle."""
        dtype, device = kv_dtype(model), next(model.parameters()).device
        pool = self.pool
        fits = (
            pool is not None
            and pool.num_slots == num_slots
            and pool.max_len >= pool_width(positions)
            and pool.dtype == dtype
            and same_device(pool.kv.device, torch.device(device))
        )
        if not fits:
            self.release()
            self.pool = SlotPool(model.config, num_slots, pool_width(positions), dtype, device)
            self.allocations += 1
        step = self.step
        if step is None or step.pool is not self.pool or step.model is not model or step.settings != settings:
            self.step = DecodeStep(model, self.pool, settings, self.failures, self.runtime)
        self.step.reset()
        self.step.prepare()
        return self.pool, self.step

    def release(self) -> None:
        """Frees the pool and its decode step (their device memory returns to the allocator); keeps ``failures``.

        The pool's K/V are freed when the last reference goes (the pool holds no cycle); only CUDA's cached blocks
        need :func:`~infgrpo.runtime.oom.free_cached`, whose full garbage collection a CPU run does not pay here."""
        if self.pool is not None:
            cuda = self.pool.kv.device.type == "cuda"
            self.pool = self.step = None
            if cuda:
                free_cached()
