"""Whether the shared-prompt update is exact for a model (``update.share_prompt``): the rules and a probe.

    shared = resolve_share_prompt(model, "auto")   # True where exact; False with one line saying why

The probe runs the forward of :mod:`infgrpo.update.shared_prompt.forward` against the unshared rows of
:mod:`infgrpo.update.logprobs` on a short input, so this module sits above both (they do not import it).
"""

from __future__ import annotations

import torch
from torch import nn

from infgrpo.registry import check_choice, choices
from infgrpo.sampler.model_support import ENGINE_ATTENTION, sliding_window, text_config
from infgrpo.settings import resolve_auto
from infgrpo.update.batching import collate
from infgrpo.update.config import SharePrompt
from infgrpo.update.logprobs import causal_lm_parts, completion_logprobs
from infgrpo.update.shared_prompt.batching import collate_shared
from infgrpo.vision.families import is_vision_config


def resolve_share_prompt(model: nn.Module, setting: SharePrompt) -> bool:
    """Whether the update shares prompts for ``model`` under ``setting``; says why once when 'auto' turns it off.

    Raises a ValueError naming ``share_prompt`` when it is 'on' but cannot be exact for ``model``.
    """
    check_choice("share_prompt", setting, choices(SharePrompt))
    return resolve_auto(
        setting,
        lambda: share_prompt_reason(model),
        lambda why: ValueError(f"share_prompt='on' cannot be exact for this model: {why}. Use 'auto' or 'off'."),
        "share_prompt",
        stacklevel=2,
    )


def share_prompt_reason(model: nn.Module) -> str | None:
    """Why ``share_prompt`` cannot be exact for ``model`` (one line), or None when it is.

    Refused: attention other than sdpa / eager (the masks are 4D tensors), a sliding window the masks do not carry
    (:func:`~infgrpo.sampler.model_support.sliding_window`: no ``layer_types``; full and sliding layers are carried),
    multimodal configs other than vision-language ones, reentrant gradient checkpointing (it drops the gradient of
    K/V leaving a checkpointed layer), and any model whose shared log-probs differ from the unshared ones on a short
    probe (e.g. attention that ignores the ``Cache`` interface).
    """
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl not in ENGINE_ATTENTION:
        return f"attn_implementation={impl!r} (the shared path passes 4D masks; it needs 'sdpa' or 'eager')"
    if sliding_window(model) is not None:
        return "the model has sliding-window attention layers the shared path's masks do not carry (no layer_types)"
    if text_config(model.config) is not model.config and not is_vision_config(model.config):
        return f"{type(model).__name__} is multimodal (the shared path runs text and image prompts only)"
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
    try:
        causal_lm_parts(model)
    except ValueError:
        return False
    return True


def _probe(model: nn.Module) -> str | None:
    """Compares shared and unshared log-probs on two short completions of one prompt, on the full-logits and the
    chunked-head paths (None when they agree to rounding)."""
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
