"""Batched prefill: the left-padded batch against a hand-built one, and each prompt's K/V and first tokens
against the prompt prefilled alone by a plain forward (float64)."""

import torch

from infgrpo.sampler.engine.prefill import padded_batch, prefill, split_cache
from tests.helpers import random_model


def test_padded_batch_left_pads_with_positions_from_zero_and_a_mask_that_hides_the_padding():
    ids, positions, mask = padded_batch([[5, 6, 7], [8], [3, 4]], pad_id=0, dtype=torch.float32, device="cpu")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8], [0, 3, 4]]
    assert positions.tolist() == [[0, 1, 2], [0, 0, 0], [0, 0, 1]]
    o, x = 0.0, torch.finfo(torch.float32).min  # open, closed
    want = [
        [[o, x, x], [o, o, x], [o, o, o]],  # no padding: causal
        [[x, x, x], [x, x, x], [x, x, o]],  # only the real token, and only from itself
        [[x, x, x], [x, o, x], [x, o, o]],
    ]
    assert mask.shape == (3, 1, 3, 3) and mask[:, 0].tolist() == want


def test_a_batch_without_padding_has_no_mask_and_plain_positions():
    ids, positions, mask = padded_batch([[5, 6], [7, 8]], pad_id=0, dtype=torch.float64, device="cpu")
    assert ids.tolist() == [[5, 6], [7, 8]] and positions.tolist() == [[0, 1], [0, 1]] and mask is None


def test_each_prompts_kv_and_first_tokens_equal_the_prompt_prefilled_alone():
    model = random_model("qwen3", torch.float64, seed=6)
    prompts = [[5, 9, 11, 40], [7], [3, 30, 31]]
    uniforms = torch.zeros(3, 2, dtype=torch.float64)
    kv, tokens, logps, _ = prefill(model, prompts, uniforms, torch.float64, 0.0, 0, 1.0, 0)
    for i, p in enumerate(prompts):
        out = model(input_ids=torch.tensor([p]), use_cache=True)
        keys = torch.stack([layer.keys[0] for layer in out.cache.layers])  # (layers, kv_heads, L, head_dim)
        values = torch.stack([layer.values[0] for layer in out.cache.layers])
        assert kv[i].shape == (2, *keys.shape)
        torch.testing.assert_close(kv[i], torch.stack([keys, values]), rtol=0, atol=1e-12)
        want = int(out.logits[0, -1].argmax())
        assert tokens[i].tolist() == [want, want]  # greedy: both samples
        torch.testing.assert_close(logps[i, 0], torch.log_softmax(out.logits[0, -1], -1)[want], rtol=0, atol=1e-12)


def test_the_batch_cache_is_freed_layer_by_layer_into_one_tensor_per_prompt():
    model = random_model("qwen3", torch.float64, seed=6)
    prompts = [[5, 9, 11, 40], [7], [3, 30, 31]]
    ids, positions, mask = padded_batch(prompts, 0, torch.float64, torch.device("cpu"))
    out = model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True)
    layers = out.cache.layers
    want = [  # the reference cut: every layer's last len(p) columns of row i, stacked
        torch.stack(
            [
                torch.stack([la.keys[i, :, -len(p) :] for la in layers]),
                torch.stack([la.values[i, :, -len(p) :] for la in layers]),
            ]
        )
        for i, p in enumerate(prompts)
    ]
    kv = split_cache(layers, [len(p) for p in prompts], torch.float32)
    assert all(la.keys is None and la.values is None for la in layers)  # the batch's K/V is no longer held
    for got, ref in zip(kv, want, strict=True):
        assert got.dtype == torch.float32 and got.is_contiguous() and got.untyped_storage().nbytes() == got.nbytes
        torch.testing.assert_close(got, ref.float(), rtol=0, atol=0)
