"""The vision tower once per prompt: image features computed once and handed to every row of the prompt.

    features = encode_images(model, collate([vision], family))           # the tower runs once
    rows = repeat_features(features, [1], [8], family)                    # the same tensors for 8 rows
    logps = completion_logprobs(model, prompt_ids, vision, completions)   # G completions, the pixels encoded once

Every family's ``forward`` in transformers 5.25 takes ``mm_encoder_outputs={"image": <get_image_features' output>}``
instead of pixels and scatters its ``pooler_output`` into the image-token positions (Qwen3-VL's ``deepstack_features``
too). Repeating the *same* feature tensors for a prompt's G rows gives each row what its own encoder pass would, and
the rows' gradients meet in the one encoder pass (a frozen tower: no gradient at all). TRL 1.16 encodes each image
once per row, G times a forward. :func:`completion_logprobs` is the reference the update's unshared path follows (the
shared-prompt path runs the prompt, and so its pixels, once anyway).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from infgrpo.vision.families import Family, family_of
from infgrpo.vision.inputs import VisionInputs, collate
from infgrpo.vision.positions import prompt_positions


def image_features_owner(model: nn.Module) -> nn.Module:
    """The innermost module of ``model`` (a VLM, possibly wrapped by peft) that has ``get_image_features``."""
    owner = None
    for module in model.modules():
        if callable(getattr(module, "get_image_features", None)):
            owner = module  # modules() goes outside in: the last one found is the inner model
    if owner is None:
        raise ValueError(f"{type(model).__name__} has no get_image_features: not a vision-language model")
    return owner


def encode_images(model: nn.Module, image_kwargs: dict[str, torch.Tensor]) -> Any:
    """The vision tower (and projector) over the collated images of some prompts, once: the model's
    ``get_image_features`` output, whose ``pooler_output`` holds the features in the prompts' image order."""
    family = family_of(model.config)
    owner = image_features_owner(model)
    args = [image_kwargs[k] for k in family.image_tensors]
    return owner.get_image_features(*args, return_dict=True)


def _repeat(values: Any, counts: list[int], repeats: list[int]) -> Any:
    """``values`` (a sequence of tensors, or a tensor, with ``counts[i]`` entries for prompt i) with each prompt's
    entries repeated ``repeats[i]`` times, prompt by prompt."""
    index, start = [], 0
    for n, r in zip(counts, repeats, strict=True):
        index += list(range(start, start + n)) * r
        start += n
    if isinstance(values, torch.Tensor):
        return values[torch.tensor(index, device=values.device)]
    return tuple(values[i] for i in index)


def repeat_features(features: Any, images_per_prompt: list[int], repeats: list[int], family: Family) -> Any:
    """``features`` (from :func:`encode_images` over some prompts with images) for rows that repeat prompt i
    ``repeats[i]`` times: the same tensors, not copies of the computation. Qwen's features are per image, Idefics3's
    per prompt (:attr:`~infgrpo.vision.families.Family.features_per_image`)."""
    counts = images_per_prompt if family.features_per_image else [1] * len(images_per_prompt)
    out = dict(features)
    out["pooler_output"] = _repeat(features.pooler_output, counts, repeats)
    if getattr(features, "deepstack_features", None) is not None:  # Qwen3-VL: one tuple per image, per layer
        out["deepstack_features"] = [_repeat(f, counts, repeats) for f in features.deepstack_features]
    return type(features)(**out)


def completion_logprobs(
    model: nn.Module, prompt_ids: list[int], vision: VisionInputs | None, completions: list[list[int]]
) -> list[torch.Tensor]:
    """Log-probs of each completion's tokens after one image prompt, in one forward over the G rows with the prompt's
    images encoded once (equal to G separate forwards with the pixels).

    Returns:
        one (len(completion_g),) tensor per completion, in the model's dtype.
    """
    rows = [prompt_ids + c for c in completions]
    width, device = max(map(len, rows)), next(model.parameters()).device
    ids = torch.zeros(len(rows), width, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):  # right-padded: every row's prompt starts at 0
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    kwargs: dict[str, Any] = {}
    if vision is not None and vision.num_images:
        family = family_of(model.config)
        image = encode_images(model, {k: v.to(device) for k, v in collate([vision], family).items()})
        kwargs["mm_encoder_outputs"] = {"image": repeat_features(image, [vision.num_images], [len(rows)], family)}
    visions = [vision] * len(rows)
    completion = width - len(prompt_ids)
    positions, _ = prompt_positions(model, ids, mask, visions, completion=completion)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, **kwargs).logits  # (G, W, V)
    logps = torch.log_softmax(logits[:, len(prompt_ids) - 1 : -1], dim=-1)  # (G, C, V): before each completion token
    targets = ids[:, len(prompt_ids) :]
    picked = logps.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (G, C)
    return [picked[i, : len(c)] for i, c in enumerate(completions)]
