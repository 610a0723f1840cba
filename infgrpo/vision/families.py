"""What differs between vision-language families, in one table: positions, token types, the processor's parts.

    family = family_of(model.config)          # FAMILIES's row for the config's model_type, or None (text-only)
    family.positions                          # "mrope" (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) or "1d" (Idefics3, Gemma 3)
    family.image_blocks                       # True (Gemma 3): an image's tokens attend to each other both ways

Every other module asks this table rather than testing a model type. A new family is a row here (and, where its
attention differs, a rule in :mod:`infgrpo.vision.masks`: Gemma 3's image blocks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Positions = Literal["mrope", "1d"]


@dataclass(frozen=True)
class Family:
    """One vision-language family as transformers 5.25 builds it."""

    name: str
    """A short name for messages (``qwen-vl``, ``idefics3``)."""
    model_types: tuple[str, ...]
    """The ``config.model_type`` values of the family."""
    positions: Positions
    """``mrope``: 3-row positions (temporal, height, width) from ``get_rope_index``, and a per-prompt ``rope_delta``
    after the prompt; ``1d``: positions ``0..L-1`` as for text."""
    token_types: str | None
    """The per-token modality key the model reads (``mm_token_type_ids``: 0 text, 1 image), or None."""
    image_tensors: tuple[str, ...]
    """The processor's per-image outputs the model takes besides the ids (``pixel_values`` first)."""
    per_image_rows: bool
    """Whether ``pixel_values`` holds rows concatenated over images (Qwen: a row per patch, ``image_grid_thw`` says
    how many; Gemma 3: one ``(3, H, W)`` row per image), rather than one padded entry per prompt (Idefics3:
    ``(B, N_max, 3, H, W)``)."""
    features_per_image: bool
    """Whether ``get_image_features``' ``pooler_output`` holds one entry per image (Qwen, Gemma 3), rather than one per
    prompt with its images' features concatenated (Idefics3)."""
    stacked_features: bool = False
    """Whether the model's forward reads ``pooler_output`` as one tensor (images, tokens, hidden) (Gemma 3), rather
    than a tuple of them (Qwen, Idefics3)."""
    image_blocks: bool = False
    """Whether the tokens of one image attend to each other both ways (Gemma 3: the model builds that mask from
    ``token_type_ids``, an image's run of 1s one block); the engine's and the update's own masks open the same blocks
    (:mod:`infgrpo.vision.masks`)."""


FAMILIES = (
    Family(
        name="qwen-vl",
        model_types=("qwen2_vl", "qwen2_5_vl", "qwen3_vl"),
        positions="mrope",
        token_types="mm_token_type_ids",
        image_tensors=("pixel_values", "image_grid_thw"),
        per_image_rows=True,
        features_per_image=True,
    ),
    Family(
        name="idefics3",
        model_types=("idefics3", "smolvlm"),
        positions="1d",
        token_types=None,
        image_tensors=("pixel_values", "pixel_attention_mask"),
        per_image_rows=False,
        features_per_image=False,
    ),
    Family(
        name="gemma3",
        model_types=("gemma3",),
        positions="1d",
        token_types="token_type_ids",
        image_tensors=("pixel_values",),
        per_image_rows=True,
        features_per_image=True,
        stacked_features=True,
        image_blocks=True,
    ),
)


def is_vision_config(config: Any) -> bool:
    """Whether ``config`` (a transformers config) is a vision-language model's: it holds a ``vision_config``."""
    return getattr(config, "vision_config", None) is not None


def family_of(config: Any) -> Family | None:
    """The :data:`FAMILIES` row of ``config``'s ``model_type``; None for a text-only config; a ValueError naming the
    supported families for a vision-language config of another family."""
    if not is_vision_config(config):
        return None
    for family in FAMILIES:
        if config.model_type in family.model_types:
            return family
    known = ", ".join(t for f in FAMILIES for t in f.model_types)
    raise ValueError(
        f"model_type={config.model_type!r} is a vision-language model infgrpo does not support yet; supported: {known}"
    )


def image_token_id(config: Any) -> int:
    """The id of the image placeholder token of a vision-language ``config`` (``image_token_id``, Idefics3's
    ``image_token_id`` too)."""
    return int(config.image_token_id)


def banned_token_ids(config: Any) -> list[int]:
    """Ids a completion must never hold: the image placeholder (and the video one where the family has it). TRL
    passes ``suppress_tokens=[image_token_id]`` to ``generate`` for the same reason: a sampled placeholder would not
    match the image features at the next forward."""
    ids = [image_token_id(config)]
    video = getattr(config, "video_token_id", None)
    return ids + ([int(video)] if video is not None else [])
