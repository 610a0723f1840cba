"""The length predictor on image prompts: keys and features that see the images, from the step's reused features.

The shipped ``tiny-vl`` (Qwen2.5-VL, M-RoPE) and ``tiny-idefics3`` in float64; the shapes task's prompts share their
text ("how many shapes?"), so only the images tell them apart.
"""

import random

import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.schedule.length_predictor import LengthPredictor, prompt_features, prompt_key
from infgrpo.vision.inputs import VisionInputs
from infgrpo.vision.parts import freeze_vision
from infgrpo.vision.processor import load_processor
from tests.sampler.engine.test_images import count_images
from tests.vision.rendered import render_questions, tiny_vlm

QUESTIONS = ((1, "how many shapes?"), (1, "how many shapes?"), (0, "how many shapes?"), (2, "colours, left to right?"))


@pytest.fixture(scope="module", params=("tiny-vl", "tiny-idefics3", "gemma3"))
def shipped(request, random_vlm_folder):
    """(the shipped tiny VLM in float64, or a random Gemma 3 (its image blocks: the features' forward passes the token
    types), its tower frozen; its processor; (ids, VisionInputs or None, the processor's answer) of each question, each
    image drawn apart)."""
    model, name = tiny_vlm(request.param, random_vlm_folder)
    freeze_vision(model)  # infgrpo's default: its features are reused within a step
    processor = load_processor(name)
    rendered = render_questions(processor, QUESTIONS, random.Random(1))
    return model.eval(), processor, rendered


def plain_last_hidden(model, out):
    """The reference: the last hidden state at the prompt's last token of HF's own forward with the pixels (the
    model computes its positions), (d,)."""
    model.model.rope_deltas = None  # no stale deltas from an earlier call (Qwen-VL)
    with torch.no_grad():
        return model(**out, output_hidden_states=True).hidden_states[-1][0, -1]


def test_same_text_different_images_get_different_keys_and_features(shipped):
    model, _, rendered = shipped
    (ids_a, va, out_a), (ids_b, vb, out_b) = rendered[:2]
    assert ids_a == ids_b  # the same text, the same ids: only the images differ
    assert prompt_key(ids_a, va) != prompt_key(ids_b, vb) != prompt_key(ids_b)
    assert prompt_key(ids_a, va) == prompt_key(ids_a, VisionInputs(va.tensors, va.token_types, 1, va.image_tokens))
    assert prompt_key(rendered[2][0], None) == prompt_key(rendered[2][0])  # a text prompt: its ids alone, as before
    prompts, visions = [ids for ids, _, _ in rendered], [v for _, v, _ in rendered]
    got = prompt_features(model, prompts, visions=visions, dtype=torch.float64)  # one left-padded batch: 1, 1, 0, 2
    want = torch.stack([plain_last_hidden(model, out) for _, _, out in rendered])  # each alone, its own positions
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert (got[0] - got[1]).abs().max() > 1e-3  # the images change the features
    text = prompt_features(model, prompts, visions=None, dtype=torch.float64)  # before: the ids without the pixels
    assert (text[0] - want[0]).abs().max() > 1e-3 and torch.equal(text[0], text[1])


def test_history_keeps_each_image_prompt_apart_and_learned_looks_cost_no_tower_run(shipped):
    model, processor, rendered = shipped
    predictor = LengthPredictor("history", max_length=64)
    (ids_a, va, _), (ids_b, vb, _) = rendered[:2]
    predictor.update([prompt_key(ids_a, va), prompt_key(ids_b, vb)], None, [[4, 4], [60, 60]])
    short, long = predictor.predict([prompt_key(ids_a, va), prompt_key(ids_b, vb)])
    assert short < 10 < 20 < long  # before: one key for both, their lengths pooled (~15.5 each)
    prompts = [ids for ids, _, _ in rendered]
    visions = [v and VisionInputs(v.tensors, v.token_types, v.num_images, v.image_tokens) for _, v, _ in rendered]
    cfg = SamplerConfig(num_slots=3, max_new_tokens=4, length_predictor="learned")  # a step's new inputs
    seen, hook = count_images(model)
    try:
        MicroGroupSampler(model, processor.tokenizer, cfg).sample(prompts, 2, vision=visions)
    finally:
        hook.remove()
    assert sum(seen) == sum(n for n, _ in QUESTIONS)  # the look's forward encoded them; the prefills reused them
