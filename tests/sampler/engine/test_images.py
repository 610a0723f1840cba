"""Image prompts on the engine: equal to HF ``generate`` with the pixels, each prompt's images encoded once.

The shipped tiny VLMs (``tiny-vl``: Qwen2.5-VL, M-RoPE; ``tiny-idefics3``: 1D positions) and random tiny Qwen2-VL
and Qwen3-VL (M-RoPE; Qwen3-VL's interleaved, and its DeepStack features added in the first text layers; built by
tests/vision/random_vlms.py, loaded by ``load_policy``) in float64, greedy, on prompts with 0, 1 and 2 images: one
prefill per prompt, its K/V shared by the group's slots, each slot at its cache position + its prompt's rotary delta
through decode steps, refills, packing moves and resumed tool turns.
"""

import random
from concurrent.futures import Future

import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.sampler import AdaptiveSpec, DynamicSpec
from infgrpo.sampler.engine.model_runner import ModelRunner
from infgrpo.vision.families import banned_token_ids
from infgrpo.vision.features import forget_features, image_features_owner
from infgrpo.vision.processor import load_processor
from tests.vision.random_vlms import BUILT
from tests.vision.rendered import render_questions, tiny_vlm

QUESTIONS = ((0, "how many shapes?"), (1, "colours, left to right?"), (2, "how many?"), (1, "how many shapes?"))
STEPS = 12


FAMILIES = ("tiny-vl", "tiny-idefics3", *BUILT)
WITH_GEMMA3 = pytest.mark.parametrize("shipped", [*FAMILIES, "gemma3"], indirect=True)
"""Gemma 3 too (its rollouts: tests/sampler/engine/test_gemma3.py)."""


@pytest.fixture(scope="module", params=FAMILIES)
def shipped(request, random_vlm_folder):
    """(a tiny VLM in float64: shipped, or a random one of a family none ships; its processor; the rendered prompts:
    (ids, VisionInputs or None, the processor's answer) for 0, 1, 2 and 1 images)."""
    model, name = tiny_vlm(request.param, random_vlm_folder)
    processor = load_processor(name)
    rendered = render_questions(processor, QUESTIONS, random.Random(0))
    return model.eval(), processor, rendered


def generate(model, inputs, tokens=(), steps=STEPS, pad=0):
    """HF ``generate``'s greedy continuation of the processor's answer ``inputs`` followed by ``tokens`` (text), with
    the pixels (the model computes its own positions) and the image tokens suppressed, as TRL runs it."""
    kwargs = dict(inputs)
    if tokens:
        extra = torch.tensor([list(tokens)])
        kwargs["input_ids"] = torch.cat([inputs["input_ids"], extra], dim=1)
        kwargs["attention_mask"] = torch.ones_like(kwargs["input_ids"])
        for key in ("mm_token_type_ids", "token_type_ids"):  # the tokens after the prompt are text (Gemma 3: types)
            if key in kwargs:
                kwargs[key] = torch.cat([inputs[key], torch.zeros_like(extra)], dim=1)
    out = model.generate(
        **kwargs, max_new_tokens=steps, do_sample=False, suppress_tokens=banned_token_ids(model.config),
        pad_token_id=pad,
    )  # fmt: skip
    return out[0, kwargs["input_ids"].shape[1] :].tolist()


def engine(model, processor, slots, **kw):
    cfg = SamplerConfig(num_slots=slots, max_new_tokens=STEPS, length_predictor="none", **kw)
    return MicroGroupSampler(model, processor.tokenizer, cfg)


def count_images(model):
    """A list that grows by the number of images each call of the vision tower encodes, and the hook's handle."""
    owner = image_features_owner(model)
    seen = []
    qwen = hasattr(owner, "visual")  # Qwen-VL: forward(pixels, grid_thw), a grid row per image; else (N, 3, H, W)
    tower = owner.visual if qwen else getattr(owner, "vision_model", None) or owner.vision_tower  # Idefics3, Gemma 3

    def hook(module, args, kwargs, out):
        key, at = ("grid_thw", 1) if qwen else ("pixel_values", 0)
        seen.append((kwargs[key] if key in kwargs else args[at]).shape[0])

    hook = tower.register_forward_hook(hook, with_kwargs=True)
    return seen, hook


@pytest.mark.parametrize("slots", [1, 3, 8])
def test_greedy_rollouts_equal_hf_generate_with_the_pixels(shipped, slots):
    model, processor, rendered = shipped
    want = [generate(model, out) for _, _, out in rendered]
    assert any(len(w) > 4 for w in want)  # decode steps after an image prompt, not only a first token
    forget_features([v for _, v, _ in rendered])  # a new step: a frozen tower's features kept by an earlier test go
    seen, hook = count_images(model)
    try:
        got = engine(model, processor, slots, temperature=0.0).sample(
            [ids for ids, _, _ in rendered], 2, vision=[v for _, v, _ in rendered]
        )
    finally:
        hook.remove()
    assert got.completion_ids == [w for w in want for _ in range(2)]
    assert sum(seen) == sum(n for n, _ in QUESTIONS)  # each prompt's images once, not x G
    assert got.stats["prefill_tokens"] == sum(len(ids) for ids, _, _ in rendered)  # each prompt prefilled once
    assert all(v is got.vision[i] for i, (_, v, _) in enumerate(rendered))  # handed on to the update


def test_sampled_tokens_do_not_depend_on_the_slots(shipped):
    model, processor, rendered = shipped
    prompts, visions = [ids for ids, _, _ in rendered], [v for _, v, _ in rendered]
    outs = [engine(model, processor, n).sample(prompts, 4, seed=7, vision=visions) for n in (3, 8)]  # 3: refilled
    for out in outs[1:]:
        assert out.completion_ids == outs[0].completion_ids
        assert all(torch.equal(a, b) for a, b in zip(out.logprobs, outs[0].logprobs, strict=True))
    assert len({tuple(c) for c in outs[0].completion_ids}) > len(prompts)  # samples of a prompt differ


QWEN_ONLY = pytest.mark.parametrize("shipped", ["tiny-vl"], indirect=True)  # M-RoPE: the case positions can break


class GrowOnce:
    """An adaptive-groups judge: a group has a spread once it holds twice the group size; the step trains on its last
    samples (the extension's)."""

    def spread(self, i, group):
        return len(group) >= 4

    def level(self, i):
        return "all"

    def select(self, i, group, m):
        return list(range(len(group) - m, len(group)))


@QWEN_ONLY
def test_adaptive_groups_grow_image_prompts_as_the_fixed_batch_samples_them(shipped):
    """An extension's samples continue the prompt's streams with its images: each trained row equals the fixed
    batch's sample of its index."""
    model, processor, rendered = shipped
    prompts, visions = [ids for ids, _, _ in rendered], [v for _, v, _ in rendered]
    sampler = engine(model, processor, 3)
    fixed = sampler.sample(prompts, 4, seed=5, vision=visions)
    got = sampler.sample(prompts, 2, seed=5, vision=visions, adaptive=AdaptiveSpec(GrowOnce(), 4, 32))
    assert got.sample_ids == [2, 3] * len(prompts) and got.vision == visions
    assert got.completion_ids == [fixed.completion_ids[4 * i + j] for i in range(len(prompts)) for j in (2, 3)]


@QWEN_ONLY
def test_dynamic_sampling_decodes_drawn_image_prompts_as_the_fixed_batch(shipped):
    """A prompt drawn as slots free up (dynamic sampling) gets its images by draw position: the groups kept equal the
    fixed batch's groups of the same prompts (streams keyed by draw position), each image encoded once. (Idefics3's
    1D positions need nothing of the prompt but its images, which the fixed-batch tests cover.)"""
    model, processor, rendered = shipped
    prompts, visions = [ids for ids, _, _ in rendered], [v for _, v, _ in rendered]
    sampler = engine(model, processor, 3)
    fixed = sampler.sample(prompts, 2, seed=3, vision=visions)
    drawn = []  # what the data side appends as it yields each prompt

    def source():
        for ids, vision in zip(prompts, visions, strict=True):
            drawn.append(vision)
            yield ids

    spec = DynamicSpec(target_groups=3, max_prompts=4, keep=lambda position, group: position != 1)  # drop one
    seen, hook = count_images(model)
    try:
        got = sampler.sample_dynamic(source(), 2, 3, spec, max(map(len, prompts)), vision=drawn)
    finally:
        hook.remove()
    assert got.drawn == [0, 2, 3] and all(got.vision[k] is visions[i] for k, i in enumerate(got.drawn))
    assert got.completion_ids == [fixed.completion_ids[2 * i + j] for i in (0, 2, 3) for j in range(2)]
    assert all(torch.equal(got.logprobs[k], fixed.logprobs[2 * i + j])
               for k, (i, j) in enumerate((i, j) for i in (0, 2, 3) for j in range(2)))  # fmt: skip
    assert sum(seen) == sum(n for n, _ in QUESTIONS)  # every drawn prompt's images once, the dropped one's too


@WITH_GEMMA3
def test_image_tokens_are_never_sampled(shipped):
    model, processor, rendered = shipped
    banned = banned_token_ids(model.config)
    head = model.get_output_embeddings().weight
    saved = head.data.clone()
    ids, vision, out = rendered[1]
    try:
        with torch.no_grad():  # the image token's row along the prompt's last hidden state: the model's favourite
            hidden = model(**out, output_hidden_states=True).hidden_states[-1][0, -1]
            head[banned[0]] = hidden / hidden.norm() * head.norm(dim=1).max() * 100
            logits = model(**out).logits[0, -1]
        assert logits.argmax().item() == banned[0]  # unbanned, greedy would pick the image token
        greedy = engine(model, processor, 2, temperature=0.0).sample([ids], 2, vision=[vision])
        assert greedy.completion_ids[0] == generate(model, out)  # generate with suppress_tokens
        sampled = engine(model, processor, 4).sample([ids], 4, seed=1, vision=[vision])
        assert not any(t in banned for c in greedy.completion_ids + sampled.completion_ids for t in c)
    finally:
        head.data.copy_(saved)


class OneToolRound:
    """Turns: the first turn of every sample that ends on a stop token gets ``suffix`` (a done future) once."""

    calls = failures = timeouts = dropped = 0

    def __init__(self, suffix):
        self.suffix = suffix

    def turn_ended(self, seq, prompt):
        if seq.turns:
            return None
        done = Future()
        done.set_result(list(self.suffix))
        return done

    def rolled_back(self, seq):
        pass

    def ended(self, seq, prompt):
        return None


@pytest.mark.parametrize("resume_on_prompt", [True, False])
# Qwen3-VL: tools; Gemma 3: its image blocks in a re-prefill, its window in a prefill after kept or parked K/V
@pytest.mark.parametrize("shipped", ["tiny-vl", "tiny-idefics3", "qwen3_vl", "gemma3"], indirect=True)
def test_resumed_turns_continue_positions_as_generate_from_the_whole_sequence(shipped, resume_on_prompt, monkeypatch):
    """A resume on parked or kept K/V (text after the prompt: cache position + delta) or a whole re-prefill (the
    prompt's images again): the next turn is HF generate's from prompt + completion + suffix with the pixels."""
    model, processor, rendered = shipped
    monkeypatch.setattr(ModelRunner, "resume_on_prompt", resume_on_prompt)
    eos = processor.tokenizer.eos_token_id
    suffix = processor.tokenizer.encode("\n5\n", add_special_tokens=False)
    prompts, visions = [ids for ids, _, _ in rendered], [v for _, v, _ in rendered]
    cfg = SamplerConfig(num_slots=3, max_new_tokens=3 * STEPS, length_predictor="none", temperature=0.0)
    got = MicroGroupSampler(model, processor.tokenizer, cfg).sample(
        prompts, 2, turns=lambda: OneToolRound(suffix), vision=visions
    )
    resumed = 0
    for i, (_, _, out) in enumerate(rendered):
        first = generate(model, out, steps=3 * STEPS)
        completion = got.completion_ids[2 * i]
        assert completion[: len(first)] == first
        if first[-1] != eos:
            continue
        rest = completion[len(first) + len(suffix) :]
        assert completion[len(first) : len(first) + len(suffix)] == suffix
        want = generate(model, out, first + suffix, steps=len(rest))
        assert rest == want, i
        resumed += 1
    assert resumed >= 2


@WITH_GEMMA3
def test_a_prompt_whose_images_overflow_the_context_is_one_line_naming_the_pixels(shipped, monkeypatch):
    model, processor, rendered = shipped
    ids, vision, _ = rendered[2]  # two images
    monkeypatch.setattr(model.config.get_text_config(), "max_position_embeddings", len(ids) + 2)
    with pytest.raises(ValueError) as err:
        engine(model, processor, 2).sample([ids], 2, vision=[vision])
    message = str(err.value)
    assert "\n" not in message and "data.processor_kwargs" in message
    assert f"{vision.image_tokens} of the prompt's tokens are its images'" in message
