"""What one forward over left-padded prompts with images needs besides the ids: positions, deltas, image tensors::

    positions, deltas, images = forward_inputs(model, ids, real, visions)              # a prefill's prompts
    positions, deltas, images = forward_inputs(model, ids, real, visions, completion=C)  # prompts + C more tokens
    model(input_ids=ids, position_ids=positions, **images, ...)                          # the images' features

The engine's prefill, a resumed sample's re-prefill and the update's prompt forwards all build their image inputs
here, so each takes each prompt's images once (never x G) and positions from the model's ``get_rope_index``
(:func:`~infgrpo.vision.positions.prompt_positions`), never from the ``rope_deltas`` transformers caches on the model
object. The images are the prompts' features computed once a step while the vision tower is fixed, or their pixels,
collated, when it trains (:func:`~infgrpo.vision.features.image_inputs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from infgrpo.vision.features import image_inputs
from infgrpo.vision.inputs import VisionInputs
from infgrpo.vision.positions import prompt_positions


def forward_inputs(
    model: nn.Module,
    input_ids: torch.Tensor,
    real: torch.Tensor,
    visions: Sequence[VisionInputs | None],
    completion: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Positions, deltas and image keyword arguments of one forward over rows with images.

    Args:
        model: the vision-language model (plain or peft-wrapped; its config names the family).
        input_ids: (P, L) each row's prompt left-padded, then ``completion`` more tokens (text).
        real: (P, L) 1 on real tokens (0 on padding).
        visions: each row's vision inputs (None: a text-only row); a row of prompt + tokens carries its token types
            extended over them (:func:`~infgrpo.vision.inputs.extended`).
        completion: text tokens after each prompt in ``input_ids``.

    Returns:
        positions (3, P, L) for M-RoPE, (P, L) for 1D; deltas (P,) int64 (0 for 1D and for text rows); the image
        keyword arguments of the rows' images on ``input_ids``' device: ``mm_encoder_outputs`` or pixel tensors
        ({} when no row has one).
    """
    positions, deltas = prompt_positions(model, input_ids, real, visions, completion=completion)
    return positions, deltas, image_inputs(model, visions, input_ids.device)
