"""SlotPool: preallocated K/V for ``num_slots`` sequences, as a transformers ``Cache``.

Per layer the pool holds ``keys`` and ``values`` of shape (num_slots, kv_heads, max_len, head_dim),
allocated once with zeros (NaN/inf in masked positions would corrupt sdpa). Each slot has its own
length; a decode step writes one K/V per slot at ``lengths[slot]`` and attends through an additive
mask (num_slots, 1, 1, max_len) that opens positions ``0 .. lengths[slot]``.

The model sees an ordinary ``Cache``: with an explicit 4D mask and explicit ``position_ids`` it only
calls :meth:`SlotPool.update`, so any Hugging Face causal LM of the Llama / Qwen3 families (plain,
peft-wrapped or 4-bit) with full attention and ``sdpa`` or ``eager`` attention decodes over the pool
unchanged. Sliding-window layers are exact only below their window (the sampler refuses longer
sequences); other attention implementations are refused (see ``sampler.check_engine_support``).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


def text_config(config):  # noqa: ANN001, ANN201 - a transformers PretrainedConfig
    """The language model's part of a (possibly multimodal) config; the config itself otherwise."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def kv_shape(config) -> tuple[int, int, int]:  # noqa: ANN001 - a transformers PretrainedConfig
    """(num_layers, kv_heads, head_dim) of a decoder config."""
    cfg = text_config(config)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return cfg.num_hidden_layers, kv_heads, head_dim


class SlotLayer(CacheLayerMixin):
    """One layer's K/V pool; writes go to each slot's own position."""

    is_compileable = False

    def __init__(self, pool: SlotPool, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.pool = pool
        self.keys, self.values = keys, values  # (S, kv_heads, T, head_dim)
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Does nothing: the pool allocated this layer's K/V up front (transformers calls it on a first update)."""
        return None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):  # noqa: ANN002, ANN003
        """Writes the step's K/V (S, kv_heads, 1, head_dim) at each slot's position; returns the pool."""
        slots = self.pool.slot_index
        pos = self.pool.lengths
        self.keys[slots, :, pos] = key_states[:, :, 0].to(self.keys.dtype)
        self.values[slots, :, pos] = value_states[:, :, 0].to(self.values.dtype)
        window = self.pool.window  # attend only over positions some slot uses (a view, no copy)
        return self.keys[:, :, :window], self.values[:, :, :window]

    def get_mask_sizes(self, query_length: int, *args, **kwargs) -> tuple[int, int]:  # noqa: ANN002, ANN003
        """(kv_length, kv_offset) of the mask: the pool's attention ``window`` (set by the engine each step) and 0."""
        return self.pool.window, 0

    def get_seq_length(self) -> int:
        """Positions cached in the fullest slot, ``max(pool.lengths)`` (a device-to-host read)."""
        return int(self.pool.lengths.max())

    def get_max_length(self) -> int:
        """Positions per slot, ``max_len``: the most any slot can hold."""
        return self.keys.shape[2]


class SlotPool(Cache):
    """K/V storage for ``num_slots`` sequences of up to ``max_len`` positions each.

    Args:
        config: the model's config (layers, KV heads, head dim are read from it).
        num_slots: sequences held at once.
        max_len: positions per slot (longest prompt + max_new_tokens).
        dtype, device: must equal the model's K/V dtype and device.
    """

    def __init__(self, config, num_slots: int, max_len: int, dtype: torch.dtype, device: torch.device) -> None:  # noqa: ANN001
        n_layers, kv_heads, head_dim = kv_shape(config)
        self.num_slots, self.max_len = num_slots, max_len
        self.lengths = torch.zeros(num_slots, dtype=torch.long, device=device)  # valid positions per slot
        self.slot_index = torch.arange(num_slots, device=device)
        layers = []
        for _ in range(n_layers):
            k = torch.zeros(num_slots, kv_heads, max_len, head_dim, dtype=dtype, device=device)
            layers.append(SlotLayer(self, k, torch.zeros_like(k)))
        super().__init__(layers=layers)
        self.free: list[int] = list(range(num_slots))[::-1]
        self.window = max_len  # positions attended this step: max(lengths) + 1, set by the engine

    # -- slots ------------------------------------------------------------------------------
    def can_allocate(self) -> bool:
        """Whether some slot is free."""
        return bool(self.free)

    def allocate(self) -> int:
        """Takes a free slot off the free stack and returns its index (the lowest first on a fresh pool).

        Raises IndexError when no slot is free (check :meth:`can_allocate`). The slot's length stays 0
        until :meth:`load_prompt`.
        """
        return self.free.pop()

    def deallocate(self, slot: int) -> None:
        """Puts ``slot`` back on the free stack with length 0; its stale K/V stay in place, masked out."""
        self.lengths[slot] = 0
        self.free.append(slot)

    def load_prompt(self, slot: int, prompt_kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Copies a prefilled prompt's K/V (per layer (kv_heads, L, head_dim)) into ``slot``."""
        length = prompt_kv[0][0].shape[1]
        for layer, (k, v) in zip(self.layers, prompt_kv, strict=True):
            layer.keys[slot, :, :length] = k
            layer.values[slot, :, :length] = v
        self.lengths[slot] = length

    # -- decode step inputs -----------------------------------------------------------------
    def attention_mask(self, dtype: torch.dtype, window: int) -> torch.Tensor:
        """Additive mask (S, 1, 1, window): 0 on positions 0..lengths[s] (the new token included).

        ``window`` (max(lengths) + 1, known to the caller without a device sync) limits attention
        to the positions some slot uses; K/V beyond it are never read.
        """
        self.window = window
        pos = torch.arange(window, device=self.lengths.device)
        visible = pos.unsqueeze(0) <= self.lengths.unsqueeze(1)  # (S, T)
        mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
        mask.masked_fill_(~visible, torch.finfo(dtype).min)
        return mask[:, None, None, :]

    def nbytes(self) -> int:
        """Bytes of K/V held by the pool."""
        return sum(layer.keys.numel() * layer.keys.element_size() * 2 for layer in self.layers)

    # -- what transformers may ask of a Cache -----------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Positions cached in the fullest slot, ``max(lengths)``, for any layer (a device-to-host read)."""
        return int(self.lengths.max())

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0, *args, **kwargs) -> tuple[int, int]:  # noqa: ANN002, ANN003
        """(kv_length, kv_offset) of the mask for any layer: this step's attention ``window``, and 0."""
        return self.window, 0

    def get_max_cache_shape(self, layer_idx: int = 0) -> int:
        """Positions per slot, ``max_len``, for any layer."""
        return self.max_len
