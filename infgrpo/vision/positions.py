"""Position ids of image prompts, their decode steps and their completions, as pure functions of the prompt.

    positions, deltas = prompt_positions(model, ids, attention_mask, visions)   # (3, P, L) or (P, L); (P,)
    step_positions = decode_positions(cache_positions, deltas, "mrope")          # (3, S, 1): per slot
    rows = completion_positions(prompt_lengths, deltas, 12, "mrope")             # (3, n, 12)

M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) gives an image (t, h, w) grid positions that advance the text counter by only
``max(h, w) / merge``, so after the prompt the rotary position of a token is its **cache position + the prompt's
rope_delta** (negative: an image of 16 tokens takes 2 positions), on all three rows. The prompt's positions and delta
come from the model's own ``get_rope_index`` over the left-padded prompts (padding skipped); every later token is
text. transformers caches ``rope_deltas`` on the model object from its last prefill and reuses it when no positions are
given: wrong for a slot pool (slots hold different prompts, refills change them) and for a training forward after a
rollout. So the engine and the update pass the positions these functions give, always. 1D families (Idefics3) have
positions ``0..L-1`` over the real tokens and a delta of 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from infgrpo.vision.families import Positions, family_of
from infgrpo.vision.inputs import VisionInputs, token_types


def rope_index_owner(model: nn.Module) -> nn.Module:
    """The module of ``model`` (a VLM, possibly wrapped by peft) that has ``get_rope_index``."""
    for module in model.modules():
        if callable(getattr(module, "get_rope_index", None)):
            return module
    raise ValueError(f"{type(model).__name__} has no get_rope_index: not an M-RoPE model")


def prompt_positions(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    visions: Sequence[VisionInputs | None],
    completion: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of left-padded prompts (and ``completion`` more text tokens after each), and each prompt's delta.

    Args:
        model: the vision-language model (its config names the family).
        input_ids: (P, L) the prompts left-padded to L, followed by ``completion`` tokens when set (L includes them).
        attention_mask: (P, L) 1 on real tokens.
        visions: each prompt's vision inputs (None: a text-only prompt).
        completion: tokens after each prompt in ``input_ids`` (all text).

    Returns:
        positions (3, P, L) for M-RoPE, (P, L) for 1D (padding at 0); deltas (P,) int64 (0 for 1D).
    """
    family = family_of(model.config)
    if family is None or family.positions == "1d":
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return positions, torch.zeros(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
    width = input_ids.shape[1] - completion
    types = token_types(visions, width, completion).to(input_ids.device)
    grids = [v.tensors["image_grid_thw"] for v in visions if v is not None and v.num_images]
    grid = torch.cat(grids).to(input_ids.device) if grids else None
    owner = rope_index_owner(model)
    positions, deltas = owner.get_rope_index(
        input_ids, mm_token_type_ids=types, image_grid_thw=grid, attention_mask=attention_mask
    )
    return positions, deltas.reshape(-1)  # trailing text moves the last position and the length alike


def decode_positions(cache_positions: torch.Tensor, deltas: torch.Tensor, scheme: Positions) -> torch.Tensor:
    """Rotary positions of text after a prompt: ``cache_positions`` (S, L) (where each row writes its K/V: a decode
    step's (S, 1), or rows prefilled after a prompt's K/V) plus each row's prompt delta (S, 1), on the three M-RoPE
    rows: (3, S, L); for 1D the cache positions as they are."""
    if scheme == "1d":
        return cache_positions
    return (cache_positions + deltas).unsqueeze(0).expand(3, -1, -1)


def completion_positions(
    prompt_lengths: torch.Tensor, deltas: torch.Tensor, length: int, scheme: Positions
) -> torch.Tensor:
    """Rotary positions of completions that follow their prompts: ``len(prompt) + t + delta`` for t < ``length``;
    (3, n, length) for M-RoPE, (n, length) for 1D. ``prompt_lengths`` and ``deltas``: (n,)."""
    t = torch.arange(length, device=prompt_lengths.device)
    positions = prompt_lengths[:, None] + t[None, :]  # (n, length)
    if scheme == "1d":
        return positions
    return (positions + deltas[:, None]).unsqueeze(0).expand(3, -1, -1)
