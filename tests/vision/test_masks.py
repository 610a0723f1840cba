"""Gemma 3's attention rules as infgrpo builds them (vision/masks.py), against transformers' own mask builders."""

import random

import pytest
import torch
from transformers.models.gemma3.modeling_gemma3 import create_masks_for_vision_model, get_block_sequence_ids_for_mask

from infgrpo.assets.tiny_vlm import GEMMA3_WINDOW, tiny_vlm_config, vlm_tokenizer
from infgrpo.vision.masks import attention_window, image_blocks, layer_masks


def left_padded_types(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(types, real) (B, L) of rows left-padded with text 0s."""
    width = max(map(len, rows))
    types = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    real = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return types, real


def test_image_blocks_are_numbered_as_transformers_numbers_them():
    rng = random.Random(0)
    rows = [[rng.choice([0, 0, 1, 1, 1]) for _ in range(rng.randint(5, 40))] for _ in range(6)]
    types, _ = left_padded_types(rows)
    assert torch.equal(image_blocks(types), get_block_sequence_ids_for_mask(types))
    assert image_blocks(types).max() >= 2  # rows with several images


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_layer_masks_equal_gemma3s_masks_from_token_types(attn):
    """Two left-padded prompts with images of 16 tokens (longer than the window of 10): on every real query, the full
    and sliding masks equal those transformers builds from the 2D padding mask and the token types."""
    config = tiny_vlm_config("gemma3", vlm_tokenizer("gemma3")).get_text_config()
    config._attn_implementation = attn
    assert attention_window(config) == GEMMA3_WINDOW
    image = [1] * 16
    types, real = left_padded_types([[0] * 5 + image + [0] * 4 + image + [0] * 6, [0] * 3 + image + [0] * 9])
    n, width = types.shape
    positions = (real.cumsum(1) - 1).clamp(min=0)  # (B, L): each token's place in its own prompt
    hf = create_masks_for_vision_model(
        config=config, inputs_embeds=torch.zeros(n, width, config.hidden_size), attention_mask=real, cache=None,
        position_ids=positions, block_sequence_ids=get_block_sequence_ids_for_mask(types),
    )  # fmt: skip
    cols = torch.arange(width)
    visible = (cols[None, :] <= cols[:, None])[None] & real.bool()[:, None, :]  # (B, L, L): causal over real keys
    blocks = image_blocks(types)
    ours = layer_masks(config, visible, positions, positions, blocks, blocks)
    assert set(ours) == set(hf) == {"full_attention", "sliding_attention"}
    for kind, mask in hf.items():
        allowed = mask == 0 if mask.is_floating_point() else mask  # eager: additive; sdpa: boolean
        allowed = allowed.expand(n, 1, width, width)
        for row in range(n):
            q = real[row].bool()  # padding queries: what they see is never read
            assert torch.equal(ours[kind][row, 0][q], allowed[row, 0][q]), (kind, row)
    # both rules act: an image token sees its image's later tokens; a sliding layer drops keys a window behind
    assert ours["full_attention"][0, 0, 10, 20] and not ours["full_attention"][0, 0, 10, 30]
    assert not ours["sliding_attention"][0, 0, 40, 20] and ours["full_attention"][0, 0, 40, 20]


def test_a_window_without_layer_types_is_not_carried():
    from transformers import MistralConfig

    assert attention_window(MistralConfig(sliding_window=8)) is None  # the engine's older bound applies
    config = tiny_vlm_config("gemma3", vlm_tokenizer("gemma3"))
    assert attention_window(config) == GEMMA3_WINDOW  # a VLM's config: its text part's window
