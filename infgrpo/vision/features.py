"""The vision tower once per prompt: image features computed once and handed to every row of the prompt.

    features = encode_images(model, collate([vision], family))           # the tower runs once
    rows = repeat_features(features, [1], [8], family)                    # the same tensors for 8 rows
    positions, kwargs = rows_inputs(model, ids, mask, visions, completion=C)  # prompt + completion rows, images once
    logps = completion_logprobs(model, prompt_ids, vision, completions)   # G completions, the pixels encoded once
    kwargs = image_inputs(model, visions, device)   # a forward's images: features kept for the step, or pixels
    forget_features(visions)                        # the step's update is done: the kept features are dropped

Every family's ``forward`` in transformers 5.25 takes ``mm_encoder_outputs={"image": <get_image_features' output>}``
instead of pixels and scatters its ``pooler_output`` into the image-token positions (Qwen3-VL's ``deepstack_features``
too). Repeating the *same* feature tensors for a prompt's G rows gives each row what its own encoder pass would, and
the rows' gradients meet in the one encoder pass (a frozen tower: no gradient at all). TRL 1.16 encodes each image
once per row, G times a forward. :func:`rows_inputs` is what the update's unshared path (prompt + completion rows)
passes its forwards; :func:`completion_logprobs` is the one-prompt reference built on it (the shared-prompt path runs
the prompt, and so its pixels, once anyway).

**Reuse within a step.** While the vision side is fixed (frozen, no adapters, no active dropout: the default
``model.policy.train_vision_tower: false``) an image's features are the same at every forward, so
:func:`image_inputs` computes each prompt's once and keeps them on the prompt's
:class:`~infgrpo.vision.inputs.VisionInputs` (which lives one step): the rollout's prefill, a resumed turn's
re-prefill, the reference and old-policy passes and every iteration's update take them from there, and the tower sees
the step's images once. A trained tower gets no reuse (each forward runs it, as its gradients need).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from infgrpo.vision.families import Family, family_of
from infgrpo.vision.inputs import VisionInputs, collate, token_types
from infgrpo.vision.parts import fixed_vision
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


def split_features(features: Any, images_per_prompt: list[int], family: Family) -> list[Any]:
    """``features`` (from :func:`encode_images` over some prompts with images) as one output per prompt, each
    holding only that prompt's entries of ``pooler_output`` (and of Qwen3-VL's ``deepstack_features``): the same
    tensors, not copies. Qwen's features are per image, Idefics3's per prompt
    (:attr:`~infgrpo.vision.families.Family.features_per_image`)."""
    counts = images_per_prompt if family.features_per_image else [1] * len(images_per_prompt)
    deep = getattr(features, "deepstack_features", None)  # Qwen3-VL: per layer, one tensor per image
    out, start = [], 0
    for n in counts:
        fields = {"pooler_output": tuple(features.pooler_output[start : start + n])}
        if deep is not None:
            fields["deepstack_features"] = [tuple(layer[start : start + n]) for layer in deep]
        out.append(type(features)(**fields))
        start += n
    return out


def join_features(parts: Sequence[Any], family: Family) -> Any:
    """One-prompt outputs (:func:`split_features`) as the output of rows holding those prompts in turn (a prompt may
    come several times): what a forward takes as ``mm_encoder_outputs={"image": ...}`` (``pooler_output`` a tuple; for
    Gemma 3 one stacked tensor (images, tokens, hidden): :attr:`~infgrpo.vision.families.Family.stacked_features`)."""
    pooled = tuple(t for p in parts for t in p.pooler_output)
    fields = {"pooler_output": torch.stack(pooled) if family.stacked_features else pooled}
    if getattr(parts[0], "deepstack_features", None) is not None:
        layers = range(len(parts[0].deepstack_features))
        fields["deepstack_features"] = [tuple(t for p in parts for t in p.deepstack_features[k]) for k in layers]
    return type(parts[0])(**fields)


def rows_features(features: Any, images_per_prompt: list[int], order: list[int], family: Family) -> Any:
    """``features`` (from :func:`encode_images` over some prompts with images) for rows of those prompts, row r a row
    of prompt ``order[r]``: the same tensors, not copies of the computation."""
    parts = split_features(features, images_per_prompt, family)
    return join_features([parts[i] for i in order], family)


def repeat_features(features: Any, images_per_prompt: list[int], repeats: list[int], family: Family) -> Any:
    """``features`` for rows that repeat prompt i ``repeats[i]`` times, prompt by prompt (:func:`rows_features`)."""
    order = [i for i, r in enumerate(repeats) for _ in range(r)]
    return rows_features(features, images_per_prompt, order, family)


def image_inputs(
    model: nn.Module, visions: Sequence[VisionInputs | None], device: torch.device, pixels: bool = True
) -> dict[str, Any]:
    """The image keyword arguments of one forward over rows, row r holding the prompt of ``visions[r]``.

    While the vision side is fixed (:func:`~infgrpo.vision.parts.fixed_vision`: frozen, no adapters, no active
    dropout: ``model.policy.train_vision_tower: false``) each prompt's features are computed once and kept on its
    :class:`VisionInputs` (:attr:`~infgrpo.vision.inputs.VisionInputs.encoded`, keyed by the module that computed
    them, so a separate reference model computes its own): this forward encodes only the prompts no earlier forward
    encoded, in one call without gradients, and hands every row its prompt's features as ``mm_encoder_outputs``.
    Otherwise (the tower trains) nothing is kept: with ``pixels`` the collated image tensors (the tower runs inside
    the forward), else each distinct prompt encoded once for this forward, its features repeated per row.

    Returns:
        ``{"mm_encoder_outputs": {"image": ...}}``, the family's pixel tensors on ``device``, or {} (no images).
    """
    present = [v for v in visions if v is not None and v.num_images]
    if not present:
        return {}
    family = family_of(model.config)
    reuse = fixed_vision(model)
    if pixels and not reuse:
        return {k: t.to(device) for k, t in collate(visions, family).items()}  # the model casts them to its dtype
    key = id(image_features_owner(model))
    found = {id(v.encoded): v.encoded[key] for v in present if reuse and key in v.encoded}
    missing = list({id(v.encoded): v for v in present if id(v.encoded) not in found}.values())  # first seen first
    if missing:
        tensors = {k: t.to(device) for k, t in collate(missing, family).items()}
        with torch.no_grad() if reuse else contextlib.nullcontext():  # kept features hold no graph
            encoded = encode_images(model, tensors)
        for v, features in zip(missing, split_features(encoded, [v.num_images for v in missing], family), strict=True):
            found[id(v.encoded)] = features
            if reuse:
                v.encoded[key] = features
    return {"mm_encoder_outputs": {"image": join_features([found[id(v.encoded)] for v in present], family)}}


def forget_features(visions: Sequence[VisionInputs | None] | None) -> None:
    """Drops the image features the prompts of ``visions`` keep (:func:`image_inputs`): the step's update is done."""
    for v in visions or ():
        if v is not None:
            v.encoded.clear()


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
        ({} when no row has an image); for a family whose image tokens attend to each other both ways (Gemma 3) also
        ``token_type_ids`` (n, P + C), from which the model builds that mask (and its windows) itself.
    """
    positions, _ = prompt_positions(model, input_ids, attention_mask, visions, completion=completion)
    kwargs = image_inputs(model, visions, input_ids.device, pixels=False)
    if kwargs:
        kwargs |= block_types(model, visions, input_ids.shape[1] - completion, completion, input_ids.device)
    return positions, kwargs


def block_types(
    model: nn.Module, visions: Sequence[VisionInputs | None], width: int, completion: int, device: torch.device
) -> dict[str, torch.Tensor]:
    """``{"token_type_ids": (n, width + completion)}`` for a forward that lets the model build its own masks from a
    2D padding mask, when the family's image tokens attend to each other both ways (Gemma 3: the model builds that
    mask from them; the prompts left-padded to ``width``, ``completion`` text tokens after); {} otherwise."""
    family = family_of(model.config)
    if not family.image_blocks:
        return {}
    return {family.token_types: token_types(visions, width, completion).to(device)}


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
