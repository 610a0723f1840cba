"""SlotPool: preallocated K/V for ``num_slots`` sequences, as a transformers ``Cache`` of static shape.

All K/V live in one tensor ``kv`` (2, layers, num_slots, kv_heads, max_len, head_dim), allocated
once with zeros (NaN/inf in masked positions would corrupt sdpa); layer ``l`` sees the views
``kv[0, l]`` and ``kv[1, l]`` (S, kv_heads, T, head_dim). ``max_len`` is rounded up to a multiple of
128 (:func:`pool_width`), so rollouts of similar lengths reuse one pool and one shape.

A decode step runs over **every** slot and the **whole** width, so its shapes never change: each
slot writes its new K/V at ``positions[slot]`` (one ``scatter_`` per layer and K/V, tensor
indices, no per-slot loop) and attends through an additive mask (S, 1, 1, T) built on the device
from ``positions`` (:meth:`SlotPool.prepare_step`: 0 on ``0 .. positions[s]``, the dtype's finite
minimum elsewhere, never -inf). An idle slot runs at position 0 and sees only that position: its
output is finite and unused. A busy-width step (off CUDA, see :mod:`infgrpo.sampler.engine.decode_step`)
runs over the first ``n`` slots only: ``positions`` then has ``n`` rows and the layers return the
K/V of those slots (views of the same storage).

The model sees an ordinary ``Cache``: with an explicit 4D mask and explicit ``position_ids`` it only
calls :meth:`SlotLayer.update`, so any Hugging Face causal LM of the Llama / Qwen3 families (plain,
peft-wrapped or 4-bit) with full attention and ``sdpa`` or ``eager`` attention decodes over the pool
unchanged. A model with sliding-window layers (``layer_types``, Gemma 3) gets a dict of two masks, the second also
closed on the keys a window or more behind (:func:`~infgrpo.vision.masks.within_window`): every slot keeps its whole
sequence's K/V, and the window is the mask's; a window these masks cannot carry is exact only below it (the sampler
refuses longer sequences). Other attention implementations are refused
(:func:`~infgrpo.sampler.model_support.check_engine_support`).

The pool is storage only: which slot is free is the scheduler's (:mod:`infgrpo.sampler.schedule.scheduler`),
each slot's position the decode step's (:mod:`infgrpo.sampler.engine.decode_step`), and the pool with its
step is kept between rollouts by :class:`~infgrpo.sampler.engine.pool_keeper.PoolKeeper`. The device
tensors ``positions`` and ``kv`` are only written by copies and by the step itself, so nothing is read back.
Each layer holds its pool through a weak proxy, so pool and layers form no reference cycle: dropping the last
reference to a pool frees its K/V at once, without a garbage collection (a full one walks every Python object of
the process: about a second a call on a busy 2-core machine, ``benchmarks/results/vlm.md``).
"""

from __future__ import annotations

import weakref

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from infgrpo.sampler.model_support import kv_shape
from infgrpo.vision.masks import attention_window, within_window

WIDTH_MULTIPLE = 128


def pool_width(positions: int) -> int:
    """Positions a slot gets for sequences of up to ``positions`` tokens: rounded up to a multiple of 128."""
    return -(-positions // WIDTH_MULTIPLE) * WIDTH_MULTIPLE


class SlotLayer(CacheLayerMixin):
    """One layer's K/V pool; each slot writes at its own position."""

    is_compileable = False

    def __init__(self, pool: SlotPool, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.pool = weakref.proxy(pool)  # the pool owns its layers; a strong reference back would make a cycle
        self.keys, self.values = keys, values  # (S, kv_heads, T, head_dim) views of pool.kv
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Does nothing: the pool allocated this layer's K/V up front (transformers calls it on a first update)."""
        return None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):  # noqa: ANN002, ANN003
        """Writes the step's K/V (n, kv_heads, 1, head_dim) at each slot's position; returns the K/V of
        the step's n slots (every slot, or the busy front of the pool: ``SlotPool.width``)."""
        index = self.pool.write_index  # (n, kv_heads, 1, head_dim), set by SlotPool.prepare_step for this step
        keys, values = self.keys, self.values
        if self.pool.width != keys.shape[0]:
            keys, values = keys[: self.pool.width], values[: self.pool.width]
        keys.scatter_(2, index, key_states.to(keys.dtype))
        values.scatter_(2, index, value_states.to(values.dtype))
        return keys, values

    def get_mask_sizes(self, query_length: int, *args, **kwargs) -> tuple[int, int]:  # noqa: ANN002, ANN003
        """(kv_length, kv_offset) of the mask: the pool's whole width, and 0."""
        return self.pool.max_len, 0

    def get_seq_length(self) -> int:
        """Not kept: see :meth:`SlotPool.get_seq_length`."""
        return self.pool.get_seq_length()

    def get_max_length(self) -> int:
        """Positions per slot, ``max_len``: the most any slot can hold."""
        return self.keys.shape[2]


class SlotPool(Cache):
    """K/V storage for ``num_slots`` sequences of up to ``max_len`` positions each.

    Args:
        config: the model's config (layers, KV heads, head dim are read from it).
        num_slots: sequences held at once.
        max_len: positions per slot (callers round it with :func:`pool_width`).
        dtype, device: must equal the model's K/V dtype and device.
    """

    def __init__(self, config, num_slots: int, max_len: int, dtype: torch.dtype, device: torch.device) -> None:  # noqa: ANN001
        n_layers, kv_heads, head_dim = kv_shape(config)
        self.num_slots, self.max_len, self.dtype = num_slots, max_len, dtype
        self.kv = torch.zeros(2, n_layers, num_slots, kv_heads, max_len, head_dim, dtype=dtype, device=device)
        super().__init__(layers=[SlotLayer(self, self.kv[0, i], self.kv[1, i]) for i in range(n_layers)])
        self.arange = torch.arange(max_len, device=device).view(1, 1, 1, max_len)  # (1, 1, 1, T)
        self.write_index = torch.zeros(num_slots, kv_heads, 1, head_dim, dtype=torch.long, device=device)
        self.width = num_slots  # slots the next step computes (0 .. width - 1), set by prepare_step
        self.window = attention_window(config)  # sliding-window layers: their mask closes older keys too
        self.mask_open = torch.zeros((), dtype=dtype, device=device)
        self.mask_closed = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=device)  # finite, never -inf

    def load_prompt(self, slot: int, prompt_kv: torch.Tensor) -> None:
        """Copies a prefilled prompt's K/V (2, layers, kv_heads, L, head_dim) into ``slot``: one copy, all layers.

        Whatever ``slot`` held beyond ``L`` stays in place, masked out by the next steps.
        """
        self.kv[:, :, slot, :, : prompt_kv.shape[3]] = prompt_kv

    def move(self, src: int, dst: int, length: int) -> None:
        """Copies the K/V of ``src``'s first ``length`` positions into ``dst``: one copy, all layers."""
        self.kv[:, :, dst, :, :length] = self.kv[:, :, src, :, :length]

    def prepare_step(self, positions: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """Points the next forward's K/V writes at ``positions`` (n, 1) and returns its mask (n, 1, 1, T).

        ``n`` is every slot, or the first ``n`` (a busy-width step). Both effects belong to one step:
        :meth:`SlotLayer.update` writes each slot's new K/V at ``write_index`` during the forward that
        takes this mask (0 on ``0 .. positions[s]``, the finite minimum elsewhere). Four device ops,
        no read-back: the shapes are the pool's, whatever the slots' lengths. A model with sliding-window layers
        gets ``{"full_attention": that mask, "sliding_attention": it closed on keys a window or more behind}``.
        """
        pos = positions.view(-1, 1, 1, 1)  # (n, 1, 1, 1)
        self.width = pos.shape[0]
        self.write_index = pos.expand(self.width, *self.write_index.shape[1:])  # (n, kv_heads, 1, head_dim), a view
        seen = self.arange <= pos  # (n, 1, 1, T)
        full = torch.where(seen, self.mask_open, self.mask_closed)  # (n, 1, 1, T)
        if self.window is None:
            return full
        near = seen & within_window(pos, self.arange, self.window)  # (n, 1, 1, T)
        return {"full_attention": full, "sliding_attention": torch.where(near, self.mask_open, self.mask_closed)}

    def nbytes(self) -> int:
        """Bytes of K/V held by the pool."""
        return self.kv.numel() * self.kv.element_size()

    # -- what transformers may ask of a Cache -----------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Refused: slots have lengths of their own, held by the decode step as its positions.

        transformers asks only to infer positions when none are given; the engine always gives them.
        """
        raise NotImplementedError(
            "SlotPool keeps no sequence length: each slot has its own position; pass position_ids (the engine does)"
        )

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0, *args, **kwargs) -> tuple[int, int]:  # noqa: ANN002, ANN003
        """(kv_length, kv_offset) of the mask for any layer: the pool's whole width, and 0."""
        return self.max_len, 0

    def get_max_cache_shape(self, layer_idx: int = 0) -> int:
        """Positions per slot, ``max_len``, for any layer."""
        return self.max_len
