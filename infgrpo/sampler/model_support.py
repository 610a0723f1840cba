"""What the slot-pool engine needs of a model, checked before decoding: attention, windows, context, stops.

    check_engine_support(model, max_new_tokens)         # attn_implementation sdpa or eager; window
    check_prompts(model, prompt_ids, max_new_tokens)    # no empty prompt, none past the context or window
    context_overflow(model.config, 30, max_new_tokens)  # the rule itself, from a config: why 30 tokens cannot fit
    sequence_positions(model.config)                    # the positions a prompt and its completion may take
    kv_shape(model.config)                              # (layers, kv_heads, head_dim)

Also the model introspection the sampler, the pool sizing and the update share (``text_config``,
``kv_shape``, ``kv_dtype``, ``kv_bytes_per_token``: the one definition of each).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from infgrpo.vision.masks import attention_window


def text_config(config):  # noqa: ANN001, ANN201 - a transformers PretrainedConfig
    """The language model's part of a (possibly multimodal) config; the config itself otherwise."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def kv_shape(config) -> tuple[int, int, int]:  # noqa: ANN001 - a transformers PretrainedConfig
    """(num_layers, kv_heads, head_dim) of a decoder config."""
    cfg = text_config(config)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return cfg.num_hidden_layers, kv_heads, head_dim


def kv_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype attention produces K/V in: the hidden states', i.e. the input embeddings' (float32 if those
    are not floating point). Under 4-bit weights it is the compute dtype the embeddings are kept in, not the
    quantized storage; float32 with ``quantization.upcast_to_float32`` (peft casts the embeddings)."""
    emb = model.get_input_embeddings().weight
    return emb.dtype if emb.is_floating_point() else torch.float32


def kv_bytes_per_token(model: torch.nn.Module) -> int:
    """Bytes of K and V for one token position over all layers of ``model``, in :func:`kv_dtype`."""
    layers, kv_heads, head_dim = kv_shape(model.config)
    return 2 * layers * kv_heads * head_dim * (torch.finfo(kv_dtype(model)).bits // 8)


ENGINE_ATTENTION = ("eager", "sdpa")


def sliding_window(model: PreTrainedModel) -> int | None:
    """The attention window of ``model``'s sliding-window layers that the engine's masks do not carry, or None when
    every layer attends fully or the masks carry it (:func:`sliding_window_of`)."""
    return sliding_window_of(text_config(model.config))


def sliding_window_of(cfg) -> int | None:  # noqa: ANN001 - a transformers PretrainedConfig (the text part)
    """:func:`sliding_window` of a (text) config: the window the engine's masks do not carry, or None when every
    layer attends fully or the masks carry the window (full and sliding ``layer_types``:
    :func:`~infgrpo.vision.masks.attention_window`)."""
    window = getattr(cfg, "sliding_window", None)
    layer_types = getattr(cfg, "layer_types", None)
    if not window or attention_window(cfg) is not None:
        return None
    if layer_types is not None and all(t == "full_attention" for t in layer_types):
        return None
    return int(window)


def check_engine_support(model: PreTrainedModel, max_new_tokens: int) -> None:
    """Refuses attention implementations the slot-pool engine cannot drive (it passes a 4D mask), and
    completions that cannot fit below a sliding attention window."""
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl not in ENGINE_ATTENTION:
        raise ValueError(
            f"the model uses attn_implementation={impl!r}; the slot-pool engine needs 'sdpa' or 'eager' (it "
            "passes its own 4D attention mask over the slot pool). Load the model with attn_implementation='sdpa'."
        )
    window = sliding_window(model)
    if window is not None and max_new_tokens >= window:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} does not fit the model's sliding attention window "
            f"(sliding_window={window}): the slot-pool engine attends over whole sequences, which equals "
            f"windowed attention only below {window} positions (prompt included)"
        )


def stop_token_ids(model: PreTrainedModel, eos_id: int, extra: list[int]) -> list[int]:
    """The tokens that end a completion: ``eos_id``, the model's ``generation_config`` EOS ids, ``extra``.

    Chat models often list several (Qwen3: ``<|im_end|>`` and ``<|endoftext|>``); HF ``generate``
    stops on all of them, and so does the sampler. Order kept, duplicates dropped.
    """
    gen = getattr(model, "generation_config", None)
    listed = getattr(gen, "eos_token_id", None) if gen is not None else None
    listed = [] if listed is None else [listed] if isinstance(listed, int) else list(listed)
    return list(dict.fromkeys([eos_id, *listed, *extra]))


def sequence_positions(config) -> int | None:  # noqa: ANN001 - a PretrainedConfig
    """The most positions a sequence (prompt and completion) may take in a model of ``config`` on the slot-pool
    engine: below a sliding attention window (it attends over whole sequences) and within the context
    (``max_position_embeddings``); None without a bound."""
    cfg = text_config(config)
    window = sliding_window_of(cfg)
    limit = getattr(cfg, "max_position_embeddings", None)
    return min([b for b in (window - 1 if window is not None else None, limit) if b is not None], default=None)


def context_overflow(config, length: int, max_new_tokens: int) -> str | None:  # noqa: ANN001 - a PretrainedConfig
    """Why a prompt of ``length`` tokens cannot take ``max_new_tokens`` more in a model of ``config``, or None.

    The one rule (read from the config alone, so it also runs before the weights load):
    :func:`sequence_positions`. The reason continues ``"... with max_new_tokens=M "``; it gives the largest
    ``max_new_tokens`` that fits, or says that the prompt alone leaves no room for a completion.
    """
    positions = sequence_positions(config)
    if positions is None or length + max_new_tokens <= positions:
        return None
    window = sliding_window_of(text_config(config))
    if window is not None and positions == window - 1:
        what = (
            f"a sequence reaches {length + max_new_tokens} positions, but the model has sliding-window attention "
            f"layers (sliding_window={window}) and the slot-pool engine attends over whole sequences, so a sequence "
            f"stays below {window}"
        )
    else:
        needs = length + max_new_tokens
        what = f"it needs {needs} positions but the model's context (max_position_embeddings) is {positions}"
    if length >= positions:
        return f"{what}; the prompt alone takes {length} of them, leaving no room for a completion."
    return f"{what}. Shorten the prompt or lower max_new_tokens to <= {positions - length}."


def check_prompts(
    model: PreTrainedModel, prompt_ids: list[list[int]], max_new_tokens: int, vision: list | None = None
) -> None:
    """Raises a ValueError naming the prompt that is empty or cannot fit the model's context
    (:func:`context_overflow`); for a prompt with images (``vision[i]``, a
    :class:`~infgrpo.vision.inputs.VisionInputs`), the message says how many of its tokens are image tokens and names
    the pixel setting, ``data.processor_kwargs``."""
    if not prompt_ids:
        raise ValueError("prompt_ids is empty; give at least one prompt")
    for i, p in enumerate(prompt_ids):
        if len(p) == 0:
            raise ValueError(f"prompt_ids[{i}] is empty; every prompt needs at least one token")
        reason = context_overflow(model.config, len(p), max_new_tokens)
        if reason is None:
            continue
        images = getattr(vision[i], "image_tokens", 0) if vision is not None else 0
        if images:
            reason += (
                f" {images} of the prompt's tokens are its images': lower their pixels with data.processor_kwargs "
                "(e.g. {max_pixels: ...} for Qwen-VL, {size: {longest_edge: ...}} for SmolVLM)."
            )
        raise ValueError(f"prompt_ids[{i}] has {len(p)} tokens; with max_new_tokens={max_new_tokens} {reason}")
