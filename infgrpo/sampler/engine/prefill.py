"""Batched prefill: the prompts about to run, in one forward, and every sample's first token.

    kv, first_tokens, first_logps, deltas = prefill(model, prompts, uniforms, dtype, temperature, top_k, top_p, pad_id)
    kv, tokens, logps = prefill_after(model, prefixes, rows, uniforms, dtype, temperature, top_k, top_p, pad_id)

Prompts of different lengths are left-padded to the longest, with explicit positions (each prompt starts at position
0) and an additive 4D mask that hides the padding (finite minimum, never -inf: a padding query that sees nothing
still gets a finite output, which nothing reads). Left padding puts every prompt's last token in the last column, so
the LM head runs on one position (``logits_to_keep=1``). A model with sliding-window layers gets a mask per layer
type (its window counted in each prompt's own positions), and Gemma 3's image tokens see their whole image
(:mod:`infgrpo.vision.masks`); the batch's cache keeps every layer's K/V whole, the window's older keys masked
rather than dropped. Each prompt's K/V is then cut out of the batch's cache into one tensor (2, layers, kv_heads, L,
head_dim), ready to be copied into any slot with one copy.

The prompt's last logits give **all** G samples their first token at once: the tempered,
filtered distribution is built once per prompt, and each sample's own uniform (its stream at token
0) picks from it, so no sample needs a decode step or a prefill of its own.

:func:`prefill_after` prefills rows **on top of K/V already computed** (a resumed multi-turn sample: its completion
and tool results after its prompt's prefilled K/V): the prefixes are left-padded into one cache, each row's tokens
left-padded after them, its positions continuing its prefix's, and one additive mask hides both paddings. Each row's
K/V (prefix, then its tokens) is cut out as :func:`prefill` cuts a prompt's.

**Images** (a vision-language model, ``visions`` given): the prompts' images go through the vision tower once, in
this forward (their tensors collated once: :func:`~infgrpo.vision.forward_inputs.forward_inputs`), and the positions
are the model's own M-RoPE positions of the left-padded batch. Each prompt's ``rope_delta`` (M-RoPE: an image takes
fewer positions than tokens) comes back with its K/V: every later token of it, decoded or prefilled after it
(``deltas`` of :func:`prefill_after`), sits at its cache position + that delta. ``banned`` ids (the image
placeholders) are never drawn (:func:`~infgrpo.sampler.engine.sampling.sample_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedModel

from infgrpo.sampler.engine.sampling import sample_tokens
from infgrpo.vision.families import family_of
from infgrpo.vision.forward_inputs import forward_inputs
from infgrpo.vision.inputs import VisionInputs, token_types
from infgrpo.vision.masks import additive, attention_window, image_blocks, layer_masks
from infgrpo.vision.positions import decode_positions


def padded_batch(
    prompts: list[list[int]],
    pad_id: int,
    dtype: torch.dtype,
    device: torch.device,
    config: Any = None,
    types: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | dict[str, torch.Tensor] | None]:
    """Left-padded ids (P, L), positions (P, L) and an additive causal mask (P, 1, L, L) (None if no padding).

    With a ``config`` whose sliding window the masks carry, or image ``types`` (P, L) of a family whose image tokens
    attend both ways (Gemma 3), the mask is :func:`~infgrpo.vision.masks.layer_masks`' (a dict by layer type for a
    window), padding or not."""
    width = max(map(len, prompts))
    pads = torch.tensor([width - len(p) for p in prompts], device=device)  # (P,)
    ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts], device=device)  # (P, L)
    cols = torch.arange(width, device=device)
    positions = (cols.unsqueeze(0) - pads.unsqueeze(1)).clamp(min=0)  # (P, L)
    window = attention_window(config) if config is not None else None
    images = types is not None and bool((types == 1).any())
    if all(len(p) == width for p in prompts) and window is None and not images:
        return ids, positions, None  # no padding: plain causal attention, as HF generate runs it
    causal = cols.unsqueeze(0) <= cols.unsqueeze(1)  # (L_q, L_k)
    visible = causal.unsqueeze(0) & (cols.unsqueeze(0) >= pads.unsqueeze(1)).unsqueeze(1)  # (P, L_q, L_k)
    blocks = image_blocks(types.to(device)) if images else None  # (P, L)
    return ids, positions, additive(layer_masks(config, visible, positions, positions, blocks, blocks), dtype)


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
    visions: Sequence[VisionInputs | None] | None = None,
    banned: torch.Tensor | None = None,
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, list[int]]:
    """Prefills ``prompts`` together; returns their K/V, first tokens and log-probs of their samples, and deltas.

    Args:
        uniforms: (P, G) each sample's uniform for its first token (token index 0 of its stream).
        dtype: the K/V dtype the slot pool holds.
        visions: each prompt's images (a vision-language model; None: text prompts), see the module docstring.
        banned: ids never drawn (the image placeholders), or None.

    Returns:
        The K/V (one tensor per prompt, (2, layers, kv_heads, L_i, head_dim) in ``dtype``), the first tokens
        ((P, G) int64) and their log-probs ((P, G)), on the model's device; each prompt's position delta (0 but
        for M-RoPE prompts with images).
    """
    device = uniforms.device
    family = family_of(model.config)
    types = None  # Gemma 3: each image's tokens attend to each other both ways, in the prompt's mask
    if family is not None and family.image_blocks and visions is not None:
        types = token_types(visions, max(map(len, prompts)))
    ids, positions, mask = padded_batch(prompts, pad_id, dtype, device, model.config, types)
    images, deltas = {}, [0] * len(prompts)
    if visions is not None and any(v is not None for v in visions):
        pads = torch.tensor([ids.shape[1] - len(p) for p in prompts], device=device)  # (P,)
        real = torch.arange(ids.shape[1], device=device)[None] >= pads[:, None]  # (P, L): not padding
        positions, delta, images = forward_inputs(model, ids, real.long(), visions)  # the tower runs in this forward
        deltas = delta.tolist()
    cache = DynamicCache()  # every layer keeps all its K/V (the model's own would cut sliding layers to the window)
    out = model(
        input_ids=ids, position_ids=positions, attention_mask=mask, cache=cache, use_cache=True, logits_to_keep=1,
        **images,
    )  # fmt: skip
    if out.logits.shape[1] != 1:
        raise ValueError(
            f"{type(model).__name__} returned logits for {out.logits.shape[1]} positions with logits_to_keep=1; "
            "the engine needs a model that honours logits_to_keep"
        )
    tokens, logps = sample_tokens(out.logits[:, -1], uniforms, temperature, top_k, top_p, banned)  # (P, G) each
    return split_cache(out.cache.layers, [len(p) for p in prompts], dtype), tokens, logps, deltas


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


@torch.no_grad()
def prefill_after(
    model: PreTrainedModel,
    prefixes: list[torch.Tensor],
    rows: list[list[int]],
    uniforms: torch.Tensor,
    dtype: torch.dtype,
    temperature: float,
    top_k: int,
    top_p: float,
    pad_id: int,
    deltas: list[int] | None = None,
    banned: torch.Tensor | None = None,
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Prefills ``rows`` after the K/V of ``prefixes`` in one forward; returns each row's K/V (its prefix's, then
    its tokens') and the next token and log-prob of each row.

    Args:
        prefixes: one K/V tensor per row, (2, layers, kv_heads, L_i, head_dim) in ``dtype`` (a prompt's prefill).
        rows: the tokens that follow each prefix (at least one each).
        uniforms: (P, 1) each row's uniform for its next token.
        deltas: each row's prompt position delta (M-RoPE prompts with images; None: 0): the rows are text at their
            cache positions + the delta.
        banned: ids never drawn (the image placeholders), or None.

    Returns:
        One tensor per row, (2, layers, kv_heads, L_i + len(rows[i]), head_dim) in ``dtype``; the next tokens (P, 1)
        and their log-probs (P, 1), on the model's device.
    """
    device = uniforms.device
    lengths, counts = [p.shape[3] for p in prefixes], [len(r) for r in rows]
    wp, wr = max(lengths), max(counts)
    _, n_layers, kv_heads, _, head_dim = prefixes[0].shape
    # 1) the prefixes, left-padded into one cache: (P, kv_heads, wp, head_dim) a layer, zeros where padded
    past = torch.zeros(2, n_layers, len(rows), kv_heads, wp, head_dim, dtype=dtype, device=device)
    for i, prefix in enumerate(prefixes):
        past[:, :, i, :, wp - lengths[i] :] = prefix
    cache = DynamicCache(ddp_cache_data=[(past[0, layer], past[1, layer]) for layer in range(n_layers)])
    del past  # the cache holds its own copies (a layer's update concatenates)
    # 2) the rows left-padded after them, positions continuing each prefix, one mask hiding both paddings
    pads = torch.tensor([wr - n for n in counts], device=device)  # (P,)
    starts = torch.tensor([wp - n for n in lengths], device=device)  # (P,): first real prefix column
    ids = torch.tensor([[pad_id] * (wr - len(r)) + list(r) for r in rows], device=device)  # (P, wr)
    cols = torch.arange(wr, device=device)
    positions = torch.tensor(lengths, device=device).unsqueeze(1) + (cols.unsqueeze(0) - pads.unsqueeze(1)).clamp(
        min=0
    )  # (P, wr)
    text_positions = positions  # each row token's position in its sequence (the mask's window counts these)
    family = family_of(model.config)
    if family is not None and family.positions == "mrope":  # (3, P, wr): the rows are text after their prompts
        shift = torch.tensor(deltas if deltas is not None else [0] * len(rows), device=device)[:, None]
        positions = decode_positions(positions, shift, family.positions)
    keys = torch.arange(wp + wr, device=device)  # (K,): the prefix columns, then the rows'
    in_prefix = (keys.unsqueeze(0) < wp) & (keys.unsqueeze(0) >= starts.unsqueeze(1))  # (P, K)
    row_key = keys - wp  # a row column's index among the rows' columns
    in_rows = (keys.unsqueeze(0) >= wp) & (row_key.unsqueeze(0) >= pads.unsqueeze(1))  # (P, K): not padding
    causal = row_key.unsqueeze(0) <= cols.unsqueeze(1)  # (wr, K): prefix columns pass (row_key < 0)
    visible = (in_prefix | in_rows).unsqueeze(1) & causal.unsqueeze(0)  # (P, wr, K)
    key_positions = None  # (P, K): each key's position in its sequence, for a sliding window only
    if attention_window(model.config) is not None:
        prefix_positions = (keys[:wp].unsqueeze(0) - starts.unsqueeze(1)).clamp(min=0)  # (P, wp): 0 .. L_i - 1
        key_positions = torch.cat([prefix_positions, text_positions], dim=1)
    mask = additive(layer_masks(model.config, visible, text_positions, key_positions), dtype)  # (P, 1, wr, K) or dict
    out = model(
        input_ids=ids, position_ids=positions, attention_mask=mask, cache=cache, use_cache=True, logits_to_keep=1
    )
    tokens, logps = sample_tokens(out.logits[:, -1], uniforms, temperature, top_k, top_p, banned)  # (P, 1) each
    # 3) each row's K/V: its prefix's columns, then its tokens'
    kv = [torch.empty(2, n_layers, kv_heads, n + c, head_dim, dtype=dtype, device=device)
          for n, c in zip(lengths, counts, strict=True)]  # fmt: skip
    for index, layer in enumerate(out.cache.layers):
        for i, (n, c) in enumerate(zip(lengths, counts, strict=True)):
            kv[i][0, index, :, :n].copy_(layer.keys[i, :, wp - n : wp])
            kv[i][1, index, :, :n].copy_(layer.values[i, :, wp - n : wp])
            kv[i][0, index, :, n:].copy_(layer.keys[i, :, wp + wr - c :])
            kv[i][1, index, :, n:].copy_(layer.values[i, :, wp + wr - c :])
        layer.keys = layer.values = None
    return kv, tokens, logps
