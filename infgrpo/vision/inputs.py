"""One prompt's vision inputs, as the processor gave them, and several prompts' inputs collated for one forward.

    vision = VisionInputs.from_processor(out, family, image_token_id)   # out: the processor's answer for ONE prompt
    kwargs = collate([vision_a, vision_b], family)                      # pixel_values, image_grid_thw, ... for 2 rows
    visions = batch_visions(batch)                                      # a batch's items' vision inputs, or None
    image_digest(vision)                                                # 16 bytes that tell its images apart

A prompt keeps its own tensors (Qwen-VL: ``pixel_values`` (patches, dim) and ``image_grid_thw`` (images, 3);
Idefics3: ``pixel_values`` (1, images, 3, H, W) and ``pixel_attention_mask`` (1, images, H, W); Gemma 3:
``pixel_values`` (images, 3, H, W)), its per-token modality ids (``mm_token_type_ids``, Gemma 3's
``token_type_ids``, (L,)) and counts. :func:`collate` joins the prompts of one forward in their order:
Qwen-VL concatenates patches and grids (the model splits them by the grids), Gemma 3 its images; Idefics3 pads
every prompt to the most images with all-zero images, which the model drops (as its processor pads a batch). A prompt
without images adds nothing (Qwen-VL, Gemma 3) or zero images (Idefics3). Each prompt is processed once, never once
per sample.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from infgrpo.vision.families import Family


@dataclass
class VisionInputs:
    """One prompt's vision inputs (see the module docstring)."""

    tensors: dict[str, torch.Tensor]
    """The family's image tensors of this prompt (``pixel_values`` first), as the processor gave them."""
    token_types: torch.Tensor | None
    """(L,) the prompt's per-token modality ids (0 text, 1 image), for families that read them; else None."""
    num_images: int
    """Images in the prompt."""
    image_tokens: int
    """Prompt tokens that are image placeholders (what the pixels cost in the context)."""
    encoded: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)
    """This prompt's image features once computed, by the module that computed them (``id`` of the model's
    ``get_image_features`` owner), while the vision side is fixed: every later forward of the step reuses them
    (:func:`~infgrpo.vision.features.image_inputs`). Shared by the copies :func:`extended` makes; emptied after the
    step's update (:func:`~infgrpo.vision.features.forget_features`)."""

    @classmethod
    def from_processor(cls, out: Any, family: Family, image_token_id: int) -> VisionInputs:
        """From the processor's output for one prompt (a ``BatchFeature`` of batch 1, ``return_tensors="pt"``)."""
        tensors = {k: out[k] for k in family.image_tensors if k in out}
        if "image_grid_thw" in tensors:
            num_images = len(tensors["image_grid_thw"])
        elif "pixel_values" in tensors:  # Gemma 3: (images, 3, H, W); Idefics3: (1, images, 3, H, W)
            num_images = tensors["pixel_values"].shape[0 if family.per_image_rows else 1]
        else:
            num_images = 0
        types = out[family.token_types][0] if family.token_types and family.token_types in out else None
        if types is not None:  # the image tokens are the 1s (Gemma 3's processor names its start-of-image token
            image_tokens = int((types == 1).sum())  # image_token_id, not the placeholder the 1s mark)
        else:
            image_tokens = int((out["input_ids"][0] == image_token_id).sum())
        return cls(tensors, types, num_images, image_tokens)


def image_digest(vision: VisionInputs | None) -> bytes:
    """16 bytes that tell a prompt's images apart (a hash of its image tensors: their names, dtypes, shapes and
    values); empty for a prompt without images. Two prompts with the same ids and different images differ here."""
    if vision is None or not vision.num_images:
        return b""
    digest = hashlib.blake2b(digest_size=16)
    for key in sorted(vision.tensors):
        tensor = vision.tensors[key].detach().cpu().contiguous()
        digest.update(f"{key}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())  # the raw bytes, whatever the dtype
    return digest.digest()


def batch_visions(items: Sequence[dict[str, Any]]) -> list[VisionInputs | None] | None:
    """Each data item's ``vision`` (the data module's collate sets it for a row with images), or None when no item
    of the batch has one: what the sampler and the update take beside the prompt ids."""
    visions = [item.get("vision") for item in items]
    return visions if any(v is not None for v in visions) else None


def extended(vision: VisionInputs | None, n: int) -> VisionInputs | None:
    """``vision`` for its prompt followed by ``n`` text tokens (a resumed sample's row: prompt + tokens so far): its
    token types extended with ``n`` zeros, its images (and their features, :attr:`VisionInputs.encoded`) unchanged
    (None stays None)."""
    if vision is None or vision.token_types is None or n == 0:
        return vision
    return replace(vision, token_types=torch.cat([vision.token_types, vision.token_types.new_zeros(n)]))


def collate(inputs: Sequence[VisionInputs | None], family: Family) -> dict[str, torch.Tensor]:
    """The image keyword arguments of one forward over these prompts, in their order (module docstring); {} when
    none has an image."""
    present = [v for v in inputs if v is not None and v.num_images]
    if not present:
        return {}
    if family.per_image_rows:
        return {k: torch.cat([v.tensors[k] for v in present]) for k in family.image_tensors}
    most = max(v.num_images for v in present)
    out = {}
    for key in family.image_tensors:
        sample = present[0].tensors[key]
        rows = []
        for v in inputs:
            shape = (1, most, *sample.shape[2:])
            row = torch.zeros(shape, dtype=sample.dtype)
            if v is not None and v.num_images:
                row[:, : v.num_images] = v.tensors[key]
            rows.append(row)
        out[key] = torch.cat(rows)
    return out


def token_types(inputs: Sequence[VisionInputs | None], width: int, completion: int = 0) -> torch.Tensor:
    """(B, width + completion) the prompts' modality ids, left-padded to ``width`` and extended with zeros over
    ``completion`` tokens (a full-sequence forward needs them extended: ``get_rope_index`` reads every position)."""
    out = torch.zeros(len(inputs), width + completion, dtype=torch.long)
    for i, v in enumerate(inputs):
        if v is not None and v.token_types is not None:
            n = len(v.token_types)
            out[i, width - n : width] = v.token_types
    return out
