"""The shared-prompt forward: each prompt once, its completions attending to its K/V (``share_prompt``).

For a :class:`~infgrpo.update.shared_batching.SharedMicroBatch` of n completions over n_p prompts::

    1) prompts    (n_p, P)  one forward; every layer's K/V captured with their autograd history (none
                            where a group spans micro-batches and an earlier one ran its prompt:
                            :mod:`infgrpo.update.prompt_carry`)
    2) completions (n, C)   one forward at positions len(prompt) + t, attending to [its prompt | itself]
    3) the hidden state before completion token t: the prompt's last one for t = 0, the completion's
       t - 1 after it (n, C, H); the LM head turns them into log-probs as on the unshared path

Gradients of all n completions flow into the one prompt forward, so the loss, the log-probs and the
gradients are those of the ``prompt + completion`` rows, up to floating-point rounding: the prompt's
gradient is now a sum taken before the prompt's backward instead of after it. (In "float64", Hugging
Face's RMSNorm computes in float32, so the two paths then differ at float32 rounding, ~1e-7; with the
norms in float64 they agree to 1e-15, which is what the tests check.)

Why two forwards and a cache, not one packed sequence with a block mask: the packed form attends over
``P + k C`` positions for each of its ``P + k C`` queries, so its attention work and its block mask
(``(P + k C)^2`` per group, materialized: SDPA's fused kernels take a dense mask) grow with the square
of the group, while the cache form keeps the
unshared attention shape ``C x (P + C)`` per completion and drops the prompt's queries, MLP and
activations from every row but one. It needs a model whose attention layers read K/V through the
``Cache`` interface (the Llama / Qwen families, as the slot-pool engine does), which
:func:`share_prompt_reason` checks.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Literal

import torch
from torch import nn

from infgrpo.registry import check_choice, choices
from infgrpo.sampler.model_support import ENGINE_ATTENTION, kv_dtype, sliding_window, text_config
from infgrpo.update.prefix_cache import PromptCapture, PromptPrefix, caches_under_checkpointing
from infgrpo.update.prompt_carry import PromptCarry, PromptOutputs
from infgrpo.update.shared_batching import SharedMicroBatch

SharePrompt = Literal["auto", "on", "off"]
"""``share_prompt``: 'auto' (on wherever :func:`share_prompt_reason` finds it exact), 'on' (error where not), 'off'."""


def resolve_share_prompt(model: nn.Module, setting: SharePrompt) -> bool:
    """Whether the update shares prompts for ``model`` under ``setting``; says why once when 'auto' turns it off.

    Raises a ValueError naming ``share_prompt`` when it is 'on' but cannot be exact for ``model``.
    """
    check_choice("share_prompt", setting, choices(SharePrompt))
    if setting == "off":
        return False
    reason = share_prompt_reason(model)
    if reason is None:
        return True
    if setting == "on":
        raise ValueError(f"share_prompt='on' cannot be exact for this model: {reason}. Use 'auto' or 'off'.")
    warnings.warn(f"[infgrpo] share_prompt: off, because {reason}", stacklevel=2)
    return False


def attention_masks(mb: SharedMicroBatch, additive: torch.dtype | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts' (n_p, 1, P, P) and the completions' (n, 1, C, P + C) 4D masks.

    Boolean (True = attend) when ``additive`` is None, else 0 / the dtype's finite minimum. A padding
    query sees at least itself, so no row is fully masked (that would give NaN on sdpa).
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
    masks = (prompt[:, None], completion[:, None])
    if additive is None:
        return masks
    closed = torch.tensor(torch.finfo(additive).min, dtype=additive, device=device)
    zero = torch.zeros((), dtype=additive, device=device)
    return tuple(torch.where(m, zero, closed) for m in masks)


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
    prompt_mask, completion_mask = attention_masks(mb, _mask_kind(model))

    def prompt_forward() -> PromptOutputs:
        capture = PromptCapture(text_config(model.config).num_hidden_layers)
        prompt_positions = (mb.prompt_mask.cumsum(dim=1) - 1).clamp(min=0)  # (n_p, P): as the unshared rows
        with caches_under_checkpointing(model):
            out = model(
                input_ids=mb.prompt_ids, attention_mask=prompt_mask, position_ids=prompt_positions,
                cache=capture, use_cache=False, **kwargs.get("prompt", {}),
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


def share_prompt_reason(model: nn.Module) -> str | None:
    """Why ``share_prompt`` cannot be exact for ``model`` (one line), or None when it is.

    Refused: attention other than sdpa / eager (the masks are 4D tensors), sliding-window layers (the
    completions' mask is full), multimodal configs, reentrant gradient checkpointing (it drops the
    gradient of K/V leaving a checkpointed layer), and any model whose shared log-probs differ from the
    unshared ones on a short probe (e.g. attention that ignores the ``Cache`` interface).
    """
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl not in ENGINE_ATTENTION:
        return f"attn_implementation={impl!r} (the shared path passes 4D masks; it needs 'sdpa' or 'eager')"
    if sliding_window(model) is not None:
        return "the model has sliding-window attention layers (the shared path attends over whole sequences)"
    if text_config(model.config) is not model.config:
        return f"{type(model).__name__} is multimodal (the shared path runs text-only decoders)"
    for module in model.modules():
        func = getattr(module, "_gradient_checkpointing_func", None)
        # torch's checkpoint is reentrant unless told otherwise (a partial without the keyword is reentrant)
        if getattr(module, "gradient_checkpointing", False) and getattr(func, "keywords", {}).get(
            "use_reentrant", True
        ):
            return "reentrant gradient checkpointing drops the gradient of the prompt's K/V; use use_reentrant=False"
    return _probe(model)


def _has_chunked_parts(model: nn.Module) -> bool:
    """Whether ``model`` has the separate decoder and LM head the chunked log-prob path runs on."""
    from infgrpo.update.logprobs import causal_lm_parts

    try:
        causal_lm_parts(model)
    except ValueError:
        return False
    return True


def _probe(model: nn.Module) -> str | None:
    """Compares shared and unshared log-probs on two short completions of one prompt, on the full-logits and the
    chunked-head paths (None when they agree to rounding)."""
    from infgrpo.update.batching import collate
    from infgrpo.update.logprobs import completion_logprobs
    from infgrpo.update.shared_batching import collate_shared

    vocab = int(text_config(model.config).vocab_size)
    device = next(model.parameters()).device
    ids = [(vocab // 2 + 7 * k) % vocab for k in range(6)]  # ordinary tokens (special ones have extreme logits)
    prompt, completions = [ids[:3]], [ids[3:5], ids[5:]]
    was_training = model.training
    model.eval()
    plain = collate([0, 1], prompt * 2, completions, 0).to(device)
    shared = collate_shared([0, 1], [0, 0], prompt, completions, 0).to(device)
    chunks = [0] if not _has_chunked_parts(model) else [0, 8]  # full logits; the chunked head's hidden states
    err, scale = 0.0, 1.0
    try:
        with torch.no_grad():
            for chunk in chunks:
                want = completion_logprobs(model, plain, 1.0, chunk).float()[plain.completion_mask.bool()]
                try:
                    got = completion_logprobs(model, shared, 1.0, chunk).float()[shared.completion_mask.bool()]
                except Exception as fail:  # noqa: BLE001 - whatever breaks the shared forward means: not supported
                    name = type(model).__name__
                    return f"the shared-prompt forward fails on {name} ({type(fail).__name__}: {fail})"
                err, scale = max(err, (got - want).abs().max().item()), max(scale, want.abs().max().item())
    finally:
        model.train(was_training)
    # kernels differ by shape, so the two paths agree to rounding: ~1e-6 relative in float32 (1e-3 in half);
    # a model whose attention skips the cache interface is off by O(1)
    tol = (1e-2 if next(model.parameters()).dtype in (torch.float16, torch.bfloat16) else 1e-3) * scale
    if not err <= tol:
        return f"{type(model).__name__}'s shared-prompt log-probs differ from the unshared ones by {err:.3g}"
    return None
