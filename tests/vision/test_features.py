"""G completions of one image prompt: the pixels encoded once, equal to G separate forwards with the pixels."""

import torch

from infgrpo.vision.features import completion_logprobs, image_features_owner
from infgrpo.vision.inputs import token_types
from tests.vision.conftest import render


def tower(model):
    owner = image_features_owner(model)
    return getattr(owner, "visual", None) or getattr(owner, "vision_model", None) or owner.vision_tower


def separate_forward(model, out, completion):
    """The completion's log-probs in the model's own forward with the pixels (positions computed by the model)."""
    ids = torch.cat([out["input_ids"], torch.tensor([completion])], dim=1)
    types = ("mm_token_type_ids", "token_type_ids")  # Qwen-VL's; Gemma 3's (its image blocks' mask)
    kwargs = {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask", *types)}
    for key in types:
        if key in out:  # extended with zeros over the completion, as TRL does
            kwargs[key] = torch.cat([out[key], torch.zeros(1, len(completion), dtype=torch.long)], 1)
    model.model.rope_deltas = None  # no stale deltas from an earlier call
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs).logits[0]
    logps = torch.log_softmax(logits[out["input_ids"].shape[1] - 1 : -1], dim=-1)
    return logps.gather(-1, torch.tensor(completion)[:, None])[:, 0]


def test_g_completions_with_pixels_once_equal_g_forwards_in_float64(vlm):
    model, processor = vlm
    prompt, vision, out = render(processor, 2, "colours, left to right?", seed=3)
    completions = [[20, 31, 44], [9], [50, 51, 52, 53, 54], [20, 31, 40]]
    calls = []
    hook = tower(model).register_forward_hook(lambda *a: calls.append(1))
    try:
        with torch.no_grad():
            once = completion_logprobs(model, prompt, vision, completions)
        assert len(calls) == 1  # the tower ran once for the 4 rows
        with torch.no_grad():
            each = [separate_forward(model, out, c) for c in completions]
        assert len(calls) == 1 + len(completions)
    finally:
        hook.remove()
    for got, want in zip(once, each, strict=True):
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_gradients_of_all_rows_meet_in_the_one_encoder_pass(vlm):
    model, processor = vlm
    prompt, vision, out = render(processor, 1, "how many?", seed=4)
    completions = [[20, 31], [9, 9, 9]]
    params = [p for p in tower(model).parameters()][:1]
    model.zero_grad()
    sum(lp.sum() for lp in completion_logprobs(model, prompt, vision, completions)).backward()
    once = params[0].grad.clone()
    model.zero_grad()
    sum(separate_forward(model, out, c).sum() for c in completions).backward()
    # the towers' norms compute in float32 (transformers' RMSNorm / LayerNorm upcast), so summing the rows' gradients
    # before the tower rather than after it differs at float32 rounding, not more
    torch.testing.assert_close(once, params[0].grad, rtol=1e-5, atol=1e-7)
    assert once.abs().max() > 1e-4  # a gradient that could differ
    model.zero_grad()


def test_token_types_are_left_padded_and_extended_with_text():
    from infgrpo.vision.inputs import VisionInputs

    v = VisionInputs({}, torch.tensor([0, 1, 1, 0]), 1, 2)
    got = token_types([v, None], width=6, completion=2)
    assert got.tolist() == [[0, 0, 0, 1, 1, 0, 0, 0], [0] * 8]


def test_a_vlm_with_a_baseline_decoder_is_one_line(vlm):
    import pytest

    from infgrpo.settings import ConfigError
    from infgrpo.vision.checks import check_decoder

    model, _ = vlm
    check_decoder(model.config, "engine")
    with pytest.raises(ConfigError, match="model.sampler.decoder='hf_full' decodes token ids only"):
        check_decoder(model.config, "hf_full")
