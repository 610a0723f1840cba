"""The attention masks the engine and the update build themselves, with Gemma 3's two rules, as pure functions::

    window = attention_window(model.config)   # the sliding layers' window when these masks carry it, else None
    blocks = image_blocks(types)              # (B, L): each image's run of image tokens numbered, -1 on text
    masks = layer_masks(model.config, visible, q_pos, k_pos, q_blocks, k_blocks)  # (B, 1, Q, K), or a dict of them
    model(..., attention_mask=additive(masks, torch.float64))                     # 0 / the finite minimum

transformers builds Gemma 3's masks from ``token_type_ids`` and the config (``create_masks_for_vision_model``): on
full-attention layers a query sees the keys before it **or in its own image** (an image's tokens attend to each other
both ways); on sliding-window layers it sees those of them that are fewer than ``sliding_window`` positions behind it
(``q - k < window``: its own image's later tokens too). The engine and the update pass 4D masks of their own (left
padding, a slot pool, K/V shared by a group), so they build the same two rules here: ``visible`` (causal over real
tokens, each caller's) opened on the image blocks, and a dict keyed by layer type (``full_attention``,
``sliding_attention``), which the model hands each layer as it is. A mask's positions are each token's index in its
own sequence (its cache position): the window counts them, never the columns of a padded batch.

A model whose sliding window these masks cannot carry (its layers are of other kinds, or it has a window and no
``layer_types``) keeps the engine's older rule: sequences stay below the window
(:func:`~infgrpo.sampler.model_support.sequence_positions`).
"""

from __future__ import annotations

import torch

CARRIED_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})
"""The layer types these masks are built for: a model's ``layer_types`` within them gets one mask per type."""


def _text(config):  # noqa: ANN001, ANN202 - a transformers PretrainedConfig
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def attention_window(config) -> int | None:  # noqa: ANN001 - a transformers PretrainedConfig
    """The window of ``config``'s sliding-window layers when :func:`layer_masks` carries it (its ``layer_types`` are
    full and sliding attention, at least one sliding, and it has a ``sliding_window``); None otherwise (every layer
    attends fully, or a window these masks do not carry)."""
    cfg = _text(config)
    window, types = getattr(cfg, "sliding_window", None), getattr(cfg, "layer_types", None)
    if not window or not types or "sliding_attention" not in types or not set(types) <= CARRIED_LAYER_TYPES:
        return None
    return int(window)


def image_blocks(types: torch.Tensor) -> torch.Tensor:
    """(B, L) each token's image block: the k-th run of image tokens (``types == 1``) in its row is block k, text and
    padding -1. transformers numbers Gemma 3's blocks the same way (``get_block_sequence_ids_for_mask``)."""
    image = types == 1
    starts = image & ~torch.nn.functional.pad(image, (1, 0))[:, :-1]  # an image token after a text one
    return torch.where(image, starts.long().cumsum(dim=1) - 1, -1)


def layer_masks(
    config,  # noqa: ANN001 - a transformers PretrainedConfig
    visible: torch.Tensor,
    q_positions: torch.Tensor | None,
    k_positions: torch.Tensor | None,
    q_blocks: torch.Tensor | None = None,
    k_blocks: torch.Tensor | None = None,
) -> torch.Tensor | dict[str, torch.Tensor]:
    """Boolean masks (True: attend) of one forward for ``config``'s model.

    Args:
        config: the model's config (its sliding window and layer types: :func:`attention_window`).
        visible: (B, Q, K) what each query sees without the two rules (causal over real tokens).
        q_positions, k_positions: (B, Q) and (B, K) each query's and key's position in its own sequence (read only
            with a carried window: None without one).
        q_blocks, k_blocks: (B, Q) and (B, K) image blocks (:func:`image_blocks`; -1 on text), or None: no image
            block (text, or a family whose image tokens attend causally).

    Returns:
        (B, 1, Q, K) ``visible`` opened on each image block; with a carried window, a dict of it
        (``full_attention``) and of it within the window (``sliding_attention``).
    """
    if q_blocks is not None and k_blocks is not None:
        same = (q_blocks[:, :, None] == k_blocks[:, None, :]) & (q_blocks[:, :, None] >= 0)  # (B, Q, K)
        visible = visible | same
    full = visible[:, None]  # (B, 1, Q, K)
    window = attention_window(config)
    if window is None:
        return full
    near = within_window(q_positions[:, :, None], k_positions[:, None, :], window)  # (B, Q, K)
    return {"full_attention": full, "sliding_attention": (visible & near)[:, None]}


def within_window(q_positions: torch.Tensor, k_positions: torch.Tensor, window: int) -> torch.Tensor:
    """Where a query sees a key on a sliding-window layer (broadcast shapes): fewer than ``window`` positions behind
    it (``q - k < window``; a later key passes: a causal or block mask decides those), transformers' rule."""
    return q_positions - k_positions < window


def additive(masks: torch.Tensor | dict[str, torch.Tensor], dtype: torch.dtype) -> torch.Tensor | dict:
    """``masks`` (one, or a dict of them) as additive masks in ``dtype``: 0 where True, the dtype's finite minimum
    elsewhere (never -inf: a fully masked padding row then stays finite)."""
    if isinstance(masks, dict):
        return {kind: additive(mask, dtype) for kind, mask in masks.items()}
    closed = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=masks.device)
    return torch.where(masks, torch.zeros((), dtype=dtype, device=masks.device), closed)
