"""Gemma 3 on the engine: its own masks, equal to HF ``generate`` with the pixels, and each mask load-bearing.

A random tiny Gemma 3 (tests/vision/random_vlms.py, loaded by ``load_policy``) in float64, greedy, on prompts with 0,
1 and 2 images of 16 tokens each, 25 to 62 tokens long: every sequence is longer than the model's sliding window (10
positions), so the sliding layers close keys in the prefill and in every decode step, and an image is longer than the
window too (its tokens see their whole image on full layers, and within the window on sliding ones). Transformers
builds those masks from ``token_type_ids`` and ``layer_types``; the engine builds its own
(:mod:`infgrpo.vision.masks`), through prefills, decode steps, refills and packing moves.
"""

import random

import pytest
import torch

import infgrpo.sampler.engine.slot_pool as slot_pool
import infgrpo.vision.masks as masks
from infgrpo.assets.tiny_vlm import GEMMA3_WINDOW
from infgrpo.sampler.engine import prefill
from infgrpo.vision.features import forget_features
from infgrpo.vision.processor import load_processor
from tests.sampler.engine.test_images import QUESTIONS, count_images, engine, generate
from tests.vision.rendered import render_questions, tiny_vlm


@pytest.fixture(scope="module")
def gemma3(random_vlm_folder):
    """(the random tiny Gemma 3 in float64, its processor, the rendered prompts: 0, 1, 2 and 1 images)."""
    model, name = tiny_vlm("gemma3", random_vlm_folder)
    processor = load_processor(name)
    rendered = render_questions(processor, QUESTIONS, random.Random(0))
    assert min(len(ids) for ids, _, _ in rendered) > GEMMA3_WINDOW
    return model.eval(), processor, rendered


def rollout(model, processor, rendered, slots, group=2, seed=0, **kw):
    forget_features([v for _, v, _ in rendered])  # each rollout encodes its images (a new step)
    prompts, visions = [ids for ids, _, _ in rendered], [v for _, v, _ in rendered]
    return engine(model, processor, slots, **kw).sample(prompts, group, seed=seed, vision=visions)


@pytest.mark.parametrize("slots", [1, 3, 8])
def test_greedy_rollouts_equal_hf_generate_with_the_pixels(gemma3, slots):
    model, processor, rendered = gemma3
    want = [generate(model, out) for _, _, out in rendered]  # token_type_ids in: HF builds Gemma 3's masks
    assert len({tuple(w) for w in want}) == len(want) and sum(map(len, want)) > 20  # image-dependent, decoded
    seen, hook = count_images(model)
    try:
        got = rollout(model, processor, rendered, slots, temperature=0.0)
    finally:
        hook.remove()
    assert got.completion_ids == [w for w in want for _ in range(2)]
    assert sum(seen) == sum(n for n, _ in QUESTIONS)  # each prompt's images once, not x G
    assert got.stats["prefill_tokens"] == sum(len(ids) for ids, _, _ in rendered)


def test_sampled_tokens_do_not_depend_on_the_slots(gemma3):
    model, processor, rendered = gemma3
    outs = [rollout(model, processor, rendered, n, group=4, seed=7) for n in (3, 8)]  # 3: refilled and packed
    assert outs[1].completion_ids == outs[0].completion_ids
    assert all(torch.equal(a, b) for a, b in zip(outs[1].logprobs, outs[0].logprobs, strict=True))
    assert len({tuple(c) for c in outs[0].completion_ids}) > len(rendered)  # samples of a prompt differ


def no_blocks(types):
    """The image blocks dropped: image tokens attend causally, as text does."""
    return torch.full_like(types, -1)


def no_window(q_positions, k_positions, window):
    """The sliding window dropped: sliding layers attend as full ones do."""
    return torch.ones_like(q_positions - k_positions, dtype=torch.bool)


@pytest.mark.parametrize("drop", ["image blocks", "window"])
def test_each_mask_is_load_bearing(gemma3, drop, monkeypatch):
    """Without either rule the engine no longer equals HF generate: the equality above tests both."""
    model, processor, rendered = gemma3
    if drop == "image blocks":
        monkeypatch.setattr(prefill, "image_blocks", no_blocks)
    else:
        monkeypatch.setattr(masks, "within_window", no_window)
        monkeypatch.setattr(slot_pool, "within_window", no_window)
    want = [generate(model, out) for _, _, out in rendered]
    got = rollout(model, processor, rendered, 3, temperature=0.0)
    assert got.completion_ids[::2] != want
    if drop == "image blocks":  # the text prompt has no image: it still decodes as generate
        assert got.completion_ids[0] == want[0]
