"""The vision tower once per prompt: image features computed once and handed to every row of the prompt.

    features = encode_images(model, collate([vision], family))           # the tower runs once
    rows = repeat_features(features, [1], [8], family)                    # the same tensors for 8 rows
    positions, kwargs = rows_inputs(model, ids, mask, visions, completion=C)  # prompt + completion rows, images once
    logps = completion_logprobs(model, prompt_ids, vision, completions)   # G completions, the pixels encoded once

Every family's ``forward`` in transformers 5.25 takes ``mm_encoder_outputs={"image": <get_image_features' output>}``
instead of pixels and scatters its ``pooler_output`` into the image-token positions (Qwen3-VL's ``deepstack_features``
too). Repeating the *same* feature tensors for a prompt's G rows gives each row what its own encoder pass would, and
the rows' gradients meet in the one encoder pass (a frozen tower: no gradient at all). TRL 1.16 encodes each image
once per row, G times a forward. :func:`rows_inputs` is what the update's unshared path (prompt + completion rows)
passes its forwards; :func:`completion_logprobs` is the one-prompt reference built on it (the shared-prompt path runs
the prompt, and so its pixels, once anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
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


def _gather(values: Any, counts: list[int], order: list[int]) -> Any:
    """``values`` (a sequence of tensors, or a tensor, with ``counts[i]`` entries for prompt i) as the entries of
    prompts ``order[0]``, ``order[1]``, ... in turn (a prompt may come several times)."""
    starts = [sum(counts[:i]) for i in range(len(counts))]
    index = [k for i in order for k in range(starts[i], starts[i] + counts[i])]
    if isinstance(values, torch.Tensor):
        return values[torch.tensor(index, device=values.device)]
    return tuple(values[i] for i in index)


def rows_features(features: Any, images_per_prompt: list[int], order: list[int], family: Family) -> Any:
    """``features`` (from :func:`encode_images` over some prompts with images) for rows of those prompts, row r a row
    of prompt ``order[r]``: the same tensors, not copies of the computation. Qwen's features are per image,
    Idefics3's per prompt (:attr:`~infgrpo.vision.families.Family.features_per_image`)."""
    counts = images_per_prompt if family.features_per_image else [1] * len(images_per_prompt)
    out = dict(features)
    out["pooler_output"] = _gather(features.pooler_output, counts, order)
    if getattr(features, "deepstack_features", None) is not None:  # Qwen3-VL: one tuple per image, per layer
        out["deepstack_features"] = [_gather(f, counts, order) for f in features.deepstack_features]
    return type(features)(**out)


def repeat_features(features: Any, images_per_prompt: list[int], repeats: list[int], family: Family) -> Any:
    """``features`` for rows that repeat prompt i ``repeats[i]`` times, prompt by prompt (:func:`rows_features`)."""
    order = [i for i, r in enumerate(repeats) for _ in range(r)]
    return rows_features(features, images_per_prompt, order, family)


def rows_inputs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    visions: Sequence[VisionInputs | None],
    completion: int = 0,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Positions and image keyword arguments of one forward over rows of prompt + completion, each distinct prompt's
    images through the vision tower once (rows of one prompt share its :class:`VisionInputs` object).

    Args:
        model: the vision-language model (or its base model; plain or peft-wrapped).
        input_ids: (n, P + C) each row's prompt left-padded to P, then its completion (right-padded to C).
        attention_mask: (n, P + C) 1 on real tokens.
        visions: each row's prompt's vision inputs (None: a text prompt).
        completion: C.

    Returns:
        positions ((3, n, P + C) for M-RoPE, (n, P + C) for 1D) and ``{"mm_encoder_outputs": {"image": ...}}``
        ({} when no row has an image).
    """
    positions, _ = prompt_positions(model, input_ids, attention_mask, visions, completion=completion)
    distinct: dict[int, int] = {}  # id of a prompt's VisionInputs -> its place among the distinct prompts with images
    order = []
    for v in visions:
        if v is not None and v.num_images:
            order.append(distinct.setdefault(id(v), len(distinct)))
    if not order:
        return positions, {}
    prompts = list({id(v): v for v in visions if v is not None and v.num_images}.values())  # first seen first
    family = family_of(model.config)
    image = encode_images(model, {k: t.to(input_ids.device) for k, t in collate(prompts, family).items()})
    rows = rows_features(image, [v.num_images for v in prompts], order, family)
    return positions, {"mm_encoder_outputs": {"image": rows}}


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
    positions, kwargs = rows_inputs(model, ids, mask, [vision] * len(rows), completion=width - len(prompt_ids))
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, **kwargs).logits  # (G, W, V)
    logps = torch.log_softmax(logits[:, len(prompt_ids) - 1 : -1], dim=-1)  # (G, C, V): before each completion token
    targets = ids[:, len(prompt_ids) :]
    picked = logps.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (G, C)
    return [picked[i, : len(c)] for i, c in enumerate(completions)]
