"""Differentiable prompt K/V for the shared-prompt update: captured from one forward, read by another.

    capture = PromptCapture(num_layers)
    decoder(input_ids=prompts, ..., cache=capture)                   # (n_p, P): K/V of every layer kept
    prefix = PromptPrefix(capture.kv, row_prompt)                    # row r reads prompt row_prompt[r]
    decoder(input_ids=completions, ..., cache=prefix)                # (n, C) attends to [prompt | itself]

Both are transformers ``Cache`` objects the model's attention layers call as usual
(``cache.update(key_states, value_states, layer_idx)``), but **neither changes state after the
forward that fills it**: :class:`PromptCapture` records the prompt's K/V (with their autograd
history) and returns them unchanged; :class:`PromptPrefix` returns ``cat(prompt K/V, new K/V)`` for
each completion row and stores nothing. So a layer recomputed by gradient checkpointing reads and
writes exactly what its first run did, which is what transformers asks of a cache kept under
checkpointing (``GradientCheckpointingLayer._can_checkpoint_with_cache``);
:func:`caches_under_checkpointing` sets that flag for the two forwards. Gradients of every completion
reach its prompt's K/V and, through them, the one prompt forward.

Expanded, not copied, where one prompt serves every row; several prompts are gathered by index. Each layer view holds
its cache through a weak proxy, so a cache and its layers form no reference cycle: the captured K/V (and the autograd
history they carry) are freed as soon as the micro-batch lets go of them, not at the next garbage collection.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator

import torch
from torch import nn
from transformers.cache_utils import Cache, CacheLayerMixin


class _Layer(CacheLayerMixin):
    """One layer's view of a :class:`PromptCapture` or :class:`PromptPrefix`; updates go to the owner."""

    is_compileable = False

    def __init__(self, owner: PromptCapture | PromptPrefix, layer_idx: int) -> None:
        super().__init__()
        self.owner, self.layer_idx = weakref.proxy(owner), layer_idx  # the owner holds its layers: no cycle back
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Nothing to allocate: the owner holds the tensors."""
        return None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):  # noqa: ANN002, ANN003
        """The owner's K/V for this layer given the step's (see the owning cache)."""
        return self.owner.update(key_states, value_states, self.layer_idx)

    def get_seq_length(self) -> int:
        """Positions the owner holds before the current input."""
        return self.owner.get_seq_length()

    def get_mask_sizes(self, query_length: int, *args, **kwargs) -> tuple[int, int]:  # noqa: ANN002, ANN003
        """(kv_length, kv_offset): the held positions plus the query's, from 0."""
        return self.owner.get_seq_length() + query_length, 0

    def get_max_length(self) -> int:
        """No fixed maximum."""
        return -1


class PromptCapture(Cache):
    """Records each layer's K/V of a prompt forward, (n_p, kv_heads, P, head_dim), and returns them unchanged."""

    def __init__(self, num_layers: int) -> None:
        self.kv: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * num_layers
        super().__init__(layers=[_Layer(self, i) for i in range(num_layers)])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):  # noqa: ANN002, ANN003
        """Keeps (key_states, value_states) for ``layer_idx`` (a recomputation overwrites them with equal tensors)."""
        self.kv[layer_idx] = (key_states, value_states)
        return key_states, value_states

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Nothing precedes the prompt."""
        return 0


class PromptPrefix(Cache):
    """Each completion row attends to its prompt's captured K/V before its own; stores nothing.

    Args:
        kv: the prompt forward's (K, V) of each layer (a :class:`PromptCapture`'s ``kv``), (n_p, kv_heads, P,
            head_dim) each.
        row_prompt: (n,) the prompt row of each completion row; None when there is one prompt (expanded).
        rows: n, the completion rows (needed when ``row_prompt`` is None).
    """

    def __init__(self, kv: list[tuple[torch.Tensor, torch.Tensor]], row_prompt: torch.Tensor | None, rows: int) -> None:
        self.kv, self.row_prompt, self.rows = list(kv), row_prompt, rows  # a copy: a recomputation rebinds capture.kv
        super().__init__(layers=[_Layer(self, i) for i in range(len(self.kv))])

    def prompt_kv(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The prompt K/V of every completion row at ``layer_idx``: (n, kv_heads, P, head_dim) each."""
        keys, values = self.kv[layer_idx]
        if self.row_prompt is None:
            return keys.expand(self.rows, -1, -1, -1), values.expand(self.rows, -1, -1, -1)
        return keys.index_select(0, self.row_prompt), values.index_select(0, self.row_prompt)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):  # noqa: ANN002, ANN003
        """``cat(prompt K, key_states)`` and the same for V, along positions: (n, kv_heads, P + C, head_dim) each."""
        keys, values = self.prompt_kv(layer_idx)
        return torch.cat([keys, key_states], dim=2), torch.cat([values, value_states], dim=2)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Prompt positions every row sees before its completion."""
        return self.kv[layer_idx][0].shape[2]


@contextlib.contextmanager
def caches_under_checkpointing(decoder: nn.Module) -> Iterator[None]:
    """Lets gradient-checkpointed layers of ``decoder`` keep the (replay-safe) caches above during the block."""
    layers = [m for m in decoder.modules() if hasattr(m, "_can_checkpoint_with_cache")]
    before = [m.__dict__.get("_can_checkpoint_with_cache") for m in layers]
    for m in layers:
        m._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for m, value in zip(layers, before, strict=True):
            if value is None:
                del m._can_checkpoint_with_cache  # back to the class attribute
            else:
                m._can_checkpoint_with_cache = value
