"""The shared-prompt forward: each prompt once, its completions attending to its K/V (``share_prompt``).

For a :class:`~infgrpo.update.shared_prompt.batching.SharedMicroBatch` of n completions over n_p prompts::

    1) prompts    (n_p, P)  one forward; every layer's K/V captured with their autograd history (none
                            where a group spans micro-batches and an earlier one ran its prompt:
                            :mod:`infgrpo.update.shared_prompt.carry`)
    2) completions (n, C)   one forward at positions len(prompt) + t, attending to [its prompt | itself]
    3) the hidden state before completion token t: the prompt's last one for t = 0, the completion's
       t - 1 after it (n, C, H); the LM head turns them into log-probs as on the unshared path

Gradients of all n completions flow into the one prompt forward, so the loss, the log-probs and the
gradients are those of the ``prompt + completion`` rows, up to floating-point rounding: the prompt's
gradient is now a sum taken before the prompt's backward instead of after it. (In "float64", Hugging
Face's RMSNorm computes in float32, so the two paths then differ at float32 rounding, ~1e-7; with the
norms in float64 they agree to 1e-15, which is what the tests check.)

Image prompts (``mb.visions``): the prompt forward takes the micro-batch's prompts' images, collated once (the
vision tower runs once per prompt, never per completion) at the model's M-RoPE positions, and each completion sits at
``len(prompt) + t + delta`` (:func:`~infgrpo.vision.positions.completion_positions`), its prompt's delta. Gemma 3's
image tokens see their whole image in the prompt forward, and sliding-window layers take the window in both forwards
(:mod:`infgrpo.vision.masks`, the engine's rules).

Why two forwards and a cache, not one packed sequence with a block mask: the packed form attends over
``P + k C`` positions for each of its ``P + k C`` queries, so its attention work and its block mask
(``(P + k C)^2`` per group, materialized: SDPA's fused kernels take a dense mask) grow with the square
of the group, while the cache form keeps the
unshared attention shape ``C x (P + C)`` per completion and drops the prompt's queries, MLP and
activations from every row but one. It needs a model whose attention layers read K/V through the
``Cache`` interface (the Llama / Qwen families, as the slot-pool engine does), which
:func:`infgrpo.update.shared_prompt.check.share_prompt_reason` checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from infgrpo.sampler.model_support import kv_dtype, text_config
from infgrpo.update.shared_prompt.batching import SharedMicroBatch
from infgrpo.update.shared_prompt.carry import PromptCarry, PromptOutputs
from infgrpo.update.shared_prompt.prefix_cache import PromptCapture, PromptPrefix, caches_under_checkpointing
from infgrpo.vision.families import family_of
from infgrpo.vision.forward_inputs import forward_inputs
from infgrpo.vision.inputs import token_types
from infgrpo.vision.masks import additive, attention_window, image_blocks, layer_masks
from infgrpo.vision.positions import completion_positions


def attention_masks(
    mb: SharedMicroBatch, additive_dtype: torch.dtype | None, config: Any = None
) -> tuple[torch.Tensor | dict, torch.Tensor | dict]:
    """The prompts' (n_p, 1, P, P) and the completions' (n, 1, C, P + C) 4D masks.

    Boolean (True = attend) when ``additive_dtype`` is None, else 0 / the dtype's finite minimum. A padding
    query sees at least itself, so no row is fully masked (that would give NaN on sdpa). With ``config`` (the model's),
    :func:`~infgrpo.vision.masks.layer_masks`' two rules: Gemma 3's image tokens see their whole image in the prompt
    forward, and a model with sliding-window layers gets each mask as a dict by layer type, the window counted in
    each token's position in its prompt + completion.
    """
    p_len, c_len = mb.prompt_ids.shape[1], mb.completion_ids.shape[1]
    device = mb.prompt_ids.device
    real = mb.prompt_mask.bool()  # (n_p, P)
    causal = torch.ones(p_len, p_len, dtype=torch.bool, device=device).tril()
    eye = torch.eye(p_len, dtype=torch.bool, device=device)
    prompt = (causal & real[:, None, :]) | eye  # (n_p, P, P)
    own = torch.ones(c_len, c_len, dtype=torch.bool, device=device).tril()  # (C, C)
    keys = real.index_select(0, mb.row_prompt)[:, None, :].expand(-1, c_len, -1)  # (n, C, P)
    completion = torch.cat([keys, own.expand(len(mb.rows), -1, -1)], dim=2)  # (n, C, P + C)
    family = family_of(config) if config is not None else None
    blocks = None
    if family is not None and family.image_blocks and mb.visions is not None:
        blocks = image_blocks(token_types(mb.visions, p_len).to(device))  # (n_p, P)
    if blocks is None and (config is None or attention_window(config) is None):  # neither rule: the plain masks
        masks = (prompt[:, None], completion[:, None])
    else:
        p_pos = (mb.prompt_mask.cumsum(dim=1) - 1).clamp(min=0)  # (n_p, P): each token's place in its prompt
        lengths = mb.prompt_mask.sum(dim=1, keepdim=True)  # (n_p, 1)
        c_pos = lengths.index_select(0, mb.row_prompt) + torch.arange(c_len, device=device)  # (n, C)
        k_pos = torch.cat([p_pos.index_select(0, mb.row_prompt), c_pos], dim=1)  # (n, P + C)
        prompt_masks = layer_masks(config, prompt, p_pos, p_pos, blocks, blocks)
        masks = (prompt_masks, layer_masks(config, completion, c_pos, k_pos))
    if additive_dtype is None:
        return masks
    return tuple(additive(m, additive_dtype) for m in masks)


def _mask_kind(model: nn.Module) -> torch.dtype | None:
    """None (boolean masks) under sdpa; else the additive masks' dtype (the embeddings', as transformers does)."""
    return None if getattr(model.config, "_attn_implementation", None) == "sdpa" else kv_dtype(model)


def _two_forwards(
    model: nn.Module, mb: SharedMicroBatch, carry: PromptCarry | None, last_of: Callable, **kwargs: object
) -> tuple[torch.Tensor, object]:
    """Runs ``model`` (a decoder or a causal LM) over the prompts (unless ``carry`` holds them from an earlier
    micro-batch), then the completions; returns ``last_of(prompt output)`` (n_p, 1, ...) and the completions' output."""
    lengths = mb.prompt_mask.sum(dim=1).index_select(0, mb.row_prompt)  # (n,) real prompt lengths
    positions = lengths[:, None] + torch.arange(mb.completion_ids.shape[1], device=lengths.device)  # (n, C)
    vision = None  # (prompt positions, deltas, image tensors) of prompts with images
    if mb.visions is not None:  # the prompts' images once, their M-RoPE positions; completions after each delta
        vision = forward_inputs(model, mb.prompt_ids, mb.prompt_mask, mb.visions)
        scheme = family_of(model.config).positions
        positions = completion_positions(lengths, vision[1].index_select(0, mb.row_prompt), positions.shape[1], scheme)
    prompt_mask, completion_mask = attention_masks(mb, _mask_kind(model), model.config)

    def prompt_forward() -> PromptOutputs:  # not called when the carry holds the prompts: no work for them then
        if vision is None:  # text: positions (n_p, P) count real tokens, as the unshared rows
            prompt_positions, images = (mb.prompt_mask.cumsum(dim=1) - 1).clamp(min=0), {}
        else:
            prompt_positions, _, images = vision
        capture = PromptCapture(text_config(model.config).num_hidden_layers)
        with caches_under_checkpointing(model):
            out = model(
                input_ids=mb.prompt_ids, attention_mask=prompt_mask, position_ids=prompt_positions,
                cache=capture, use_cache=False, **kwargs.get("prompt", {}), **images,
            )  # fmt: skip
        return capture.kv, last_of(out)  # PromptPrefix and the carry take their own copies of the list

    kv, last = carry.outputs(mb, prompt_forward) if carry is not None else prompt_forward()
    prefix = PromptPrefix(kv, None if mb.prompt_ids.shape[0] == 1 else mb.row_prompt, len(mb.rows))
    with caches_under_checkpointing(model):
        second = model(
            input_ids=mb.completion_ids, attention_mask=completion_mask, position_ids=positions,
            cache=prefix, use_cache=False, **kwargs.get("completion", {}),
        )  # fmt: skip
    return last, second


def shared_hidden(decoder: nn.Module, mb: SharedMicroBatch, carry: PromptCarry | None = None) -> torch.Tensor:
    """Final hidden states (n, C, H) before each completion token (see the module docstring)."""
    last, completions = _two_forwards(decoder, mb, carry, lambda out: out.last_hidden_state[:, -1:])
    first = last.index_select(0, mb.row_prompt)  # (n, 1, H): the prompt's last position (left padding)
    return torch.cat([first, completions.last_hidden_state[:, :-1]], dim=1)  # (n, C, H)


def shared_logits(model: nn.Module, mb: SharedMicroBatch, carry: PromptCarry | None = None) -> torch.Tensor:
    """The causal LM's own logits (n, C, V) before each completion token (the full-logits path)."""
    kwargs = {"prompt": {"logits_to_keep": 1}, "completion": {"logits_to_keep": 0}}
    last, completions = _two_forwards(model, mb, carry, lambda out: out.logits, **kwargs)
    first = last.index_select(0, mb.row_prompt)  # (n, 1, V): the prompt's last position
    return torch.cat([first, completions.logits[:, :-1]], dim=1)  # (n, C, V)
