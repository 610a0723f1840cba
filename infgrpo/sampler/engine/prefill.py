"""Batched prefill: the prompts about to run, in one forward, and every sample's first token.

    kv, first_tokens, first_logps = prefill(model, prompts, uniforms, dtype, temperature, top_k, top_p, pad_id)

Prompts of different lengths are left-padded to the longest, with explicit positions (each prompt
starts at position 0) and an additive 4D mask that hides the padding (finite minimum, never -inf: a
padding query that sees nothing still gets a finite output, which nothing reads). Left padding puts
every prompt's last token in the last column, so the LM head runs on one position
(``logits_to_keep=1``). Each prompt's K/V is then cut out of the batch's cache into one tensor
(2, layers, kv_heads, L, head_dim), ready to be copied into any slot with one copy.

The prompt's last logits give **all** G samples their first token at once: the tempered,
filtered distribution is built once per prompt, and each sample's own uniform (its stream at token
0) picks from it, so no sample needs a decode step or a prefill of its own.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from infgrpo.sampler.engine.sampling import sample_tokens


def padded_batch(
    prompts: list[list[int]], pad_id: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Left-padded ids (P, L), positions (P, L) and an additive causal mask (P, 1, L, L) (None if no padding)."""
    width = max(map(len, prompts))
    pads = torch.tensor([width - len(p) for p in prompts], device=device)  # (P,)
    ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts], device=device)  # (P, L)
    cols = torch.arange(width, device=device)
    positions = (cols.unsqueeze(0) - pads.unsqueeze(1)).clamp(min=0)  # (P, L)
    if all(len(p) == width for p in prompts):  # no padding: plain causal attention, as HF generate runs it
        return ids, positions, None
    causal = cols.unsqueeze(0) <= cols.unsqueeze(1)  # (L_q, L_k)
    visible = causal.unsqueeze(0) & (cols.unsqueeze(0) >= pads.unsqueeze(1)).unsqueeze(1)  # (P, L_q, L_k)
    closed = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=device)  # finite in every dtype
    mask = torch.where(visible, torch.zeros((), dtype=dtype, device=device), closed)
    return ids, positions, mask.unsqueeze(1)


@torch.no_grad()
def prefill(
    model: PreTrainedModel,
    prompts: list[list[int]],
    uniforms: torch.Tensor,
    dtype: torch.dtype,
    temperature: float,
    top_k: int,
    top_p: float,
    pad_id: int,
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Prefills ``prompts`` together; returns their K/V, and first tokens and log-probs of their samples.

    Args:
        uniforms: (P, G) each sample's uniform for its first token (token index 0 of its stream).
        dtype: the K/V dtype the slot pool holds.

    Returns:
        The K/V (one tensor per prompt, (2, layers, kv_heads, L_i, head_dim) in ``dtype``), the first tokens
        ((P, G) int64) and their log-probs ((P, G)), on the model's device.
    """
    device = uniforms.device
    ids, positions, mask = padded_batch(prompts, pad_id, dtype, device)
    out = model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True, logits_to_keep=1)
    if out.logits.shape[1] != 1:
        raise ValueError(
            f"{type(model).__name__} returned logits for {out.logits.shape[1]} positions with logits_to_keep=1; "
            "the engine needs a model that honours logits_to_keep"
        )
    tokens, logps = sample_tokens(out.logits[:, -1], uniforms, temperature, top_k, top_p)  # (P, G) each
    return split_cache(out.cache.layers, [len(p) for p in prompts], dtype), tokens, logps


def split_cache(layers: list, lengths: list[int], dtype: torch.dtype) -> list[torch.Tensor]:
    """Each prompt's K/V cut out of a left-padded batch cache, freeing the cache layer by layer.

    Args:
        layers: the cache's layers, each with ``keys`` and ``values`` of shape (P, kv_heads, L, head_dim).
        lengths: the P prompts' lengths (each <= L; prompt i is the last ``lengths[i]`` columns).

    Returns:
        one tensor per prompt, (2, layers, kv_heads, lengths[i], head_dim) in ``dtype``.

    One copy of the prompts' K/V at any time (plus one layer of the batch's): each layer's columns
    are copied into the per-prompt tensors, then the layer's batch tensors are dropped. Stacking all
    layers first (and then each prompt) held three copies at the peak.
    """
    _, kv_heads, width, head_dim = layers[0].keys.shape
    device = layers[0].keys.device
    kv = [torch.empty(2, len(layers), kv_heads, n, head_dim, dtype=dtype, device=device) for n in lengths]
    for index, layer in enumerate(layers):
        for i, n in enumerate(lengths):
            kv[i][0, index].copy_(layer.keys[i, :, width - n :])
            kv[i][1, index].copy_(layer.values[i, :, width - n :])
        layer.keys = layer.values = None  # the cache held the only reference: this layer's batch K/V is freed
    return kv
