"""Image features reused within a step while the vision tower is fixed: a step with reuse equals the same step
without it (each forward running the tower, as before), and the tower sees each prompt's images once a step.

The shipped ``tiny-vl`` (Qwen2.5-VL, M-RoPE) and ``tiny-idefics3`` in float64, LoRA on the language model (the tower
frozen, no adapters: ``model.policy.train_vision_tower: false``), prompts with 0, 1, 2 and 1 images. One step: a
sampled rollout, then the update with ``beta > 0`` (the reference is the policy with its adapters disabled: the same
tower) and ``num_iterations = 2`` (an old-policy pass, two optimizer steps). "Without reuse" is the same code with
:func:`~infgrpo.vision.parts.fixed_vision` answering False, which is what a trained tower gets: every forward runs the
tower (which the TRL and float64 references of tests/update/test_images.py check). The two agree bitwise: the
tower's output for an image does not depend on which images it is batched with, on these models and this CPU.
"""

import random

import pytest
import torch
from torch import nn

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.algo import Objective
from infgrpo.policy.load import load_policy
from infgrpo.sampler.engine.model_runner import ModelRunner
from infgrpo.update.config import UpdateConfig
from infgrpo.update.runner import PolicyUpdate
from infgrpo.vision import features
from infgrpo.vision.inputs import VisionInputs
from infgrpo.vision.parts import fixed_vision, vision_parameters
from infgrpo.vision.processor import load_processor
from tests.helpers import ALLOW_OBJECTIVE_WARNINGS
from tests.sampler.engine.test_images import QUESTIONS, OneToolRound, count_images
from tests.vision.rendered import render_questions

G, STEPS = 3, 6


@pytest.fixture(scope="module", params=("tiny-vl", "tiny-idefics3"))
def policy(request):
    """(LoRA policy in float64 with random adapters, so the reference differs from it; processor; rendered prompts:
    (ids, VisionInputs or None))."""
    model = load_policy(request.param, "float64", lora_r=4)
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            nn.init.normal_(p, std=0.3)  # peft starts B at zero: the reference would equal the policy
    processor = load_processor(request.param)
    rendered = [(ids, vision) for ids, vision, _ in render_questions(processor, QUESTIONS, random.Random(0))]
    return model, processor, rendered


def fresh(rendered):
    """The prompts and new VisionInputs (what the data module's collate makes for each step: nothing kept yet)."""
    copy = lambda v: VisionInputs(v.tensors, v.token_types, v.num_images, v.image_tokens)  # noqa: E731
    return [ids for ids, _ in rendered], [None if v is None else copy(v) for _, v in rendered]


def one_step(model, processor, rendered, share):
    """A rollout and a beta > 0, num_iterations = 2 update from the adapters' starting values, which it restores.
    Returns (rollouts, update stats, each optimizer step's gradients, images per call of the tower)."""
    start = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    prompts, visions = fresh(rendered)
    seen, hook = count_images(model)
    grads = []

    def optimizer_step():  # plain SGD: the second iteration runs on moved weights, so old != current
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p -= 0.5 * p.grad

    try:
        cfg = SamplerConfig(num_slots=3, max_new_tokens=STEPS, length_predictor="none")
        rollouts = MicroGroupSampler(model.eval(), processor.tokenizer, cfg).sample(prompts, G, seed=4, vision=visions)
        advantages = torch.linspace(-1.0, 1.2, len(rollouts), dtype=torch.float64)
        update = UpdateConfig(token_budget=90, num_iterations=2, skip_zero_advantage="off")
        updater = PolicyUpdate(update, Objective(beta=0.04), max_completion_length=STEPS, share_prompt=share)
        result = updater.run(
            model.train(), rollouts, advantages, lambda loss: loss.backward(), optimizer_step,
            lambda: model.zero_grad(set_to_none=True),
        )  # fmt: skip
    finally:
        hook.remove()
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in start:
                    p.copy_(start[n])
        model.zero_grad(set_to_none=True)
    assert all(not v.encoded for v in visions if v is not None)  # dropped after the update
    return rollouts, result, grads, seen


@ALLOW_OBJECTIVE_WARNINGS
@pytest.mark.parametrize("share", [True, False])
def test_a_step_with_reused_features_equals_one_without_and_encodes_each_image_once(policy, share, monkeypatch):
    model, processor, rendered = policy
    assert fixed_vision(model)
    reused = one_step(model, processor, rendered, share)
    monkeypatch.setattr(features, "fixed_vision", lambda model: False)  # every forward runs the tower, as before
    each = one_step(model, processor, rendered, share)
    (r1, u1, g1, seen1), (r2, u2, g2, seen2) = reused, each
    assert r1.completion_ids == r2.completion_ids
    assert all(torch.equal(a, b) for a, b in zip(r1.logprobs, r2.logprobs, strict=True))  # the rollout: bitwise
    assert u1.stats["micro_batches"] >= 2 and u1.stats["kl"] > 1e-6  # several micro-batches; a reference that differs
    assert u1.stats["loss"] == u2.stats["loss"] and u1.stats["kl"] == u2.stats["kl"]  # bitwise, as the gradients
    assert len(g1) == len(g2) == 2 and all(a.keys() == b.keys() for a, b in zip(g1, g2, strict=True))
    for a, b in zip(g1, g2, strict=True):  # each iteration's gradient
        assert all(torch.equal(a[k], g) for k, g in b.items())
    images = sum(n for n, _ in QUESTIONS)
    assert sum(seen1) == images  # the step: each prompt's images once, whatever the passes
    # before: rollout, reference, old policy and 2 iterations; unshared rows, once per micro-batch holding them
    assert sum(seen2) == 5 * images if share else sum(seen2) > 5 * images


def test_a_resumed_turn_re_prefilled_reuses_its_prompts_features(policy, monkeypatch):
    """A tool turn resumed by a whole re-prefill (prompt + tokens with the prompt's images) takes the features the
    first prefill kept: the same tokens, the tower once per prompt."""
    model, processor, rendered = policy
    monkeypatch.setattr(ModelRunner, "resume_on_prompt", False)
    suffix = processor.tokenizer.encode("\n5\n", add_special_tokens=False)
    cfg = SamplerConfig(num_slots=3, max_new_tokens=3 * STEPS, length_predictor="none", temperature=0.0)
    outs = []
    for reuse in (True, False):
        if not reuse:
            monkeypatch.setattr(features, "fixed_vision", lambda model: False)
        prompts, visions = fresh(rendered)
        seen, hook = count_images(model)
        try:
            got = MicroGroupSampler(model.eval(), processor.tokenizer, cfg).sample(
                prompts, 2, turns=lambda: OneToolRound(suffix), vision=visions
            )
        finally:
            hook.remove()
        outs.append((got, sum(seen)))
    (a, seen_reused), (b, seen_each) = outs
    assert a.completion_ids == b.completion_ids
    assert all(torch.equal(x, y) for x, y in zip(a.logprobs, b.logprobs, strict=True))
    resumed = sum(1 for c in a.completion_ids if any(c[i : i + len(suffix)] == suffix for i in range(len(c))))
    assert resumed >= 2  # re-prefills happened
    assert seen_reused == sum(n for n, _ in QUESTIONS) < seen_each


def test_the_vision_side_is_fixed_only_when_frozen_without_adapters_or_active_dropout():
    trained = load_policy("tiny-idefics3", "float64", lora_r=4, train_vision_tower=True)
    assert not fixed_vision(trained)  # adapters on the tower, training
    plain = load_policy("tiny-idefics3", "float64")  # full fine-tuning: the tower frozen
    assert fixed_vision(plain.train()) and not any(p.requires_grad for _, p in vision_parameters(plain))
    attention = next(m for n, m in plain.named_modules() if n.endswith("vision_model.encoder.layers.0.self_attn"))
    attention.dropout = 0.1  # as config.vision_config.attention_dropout = 0.1 sets it
    assert not fixed_vision(plain.train()) and fixed_vision(plain.eval())  # active in training mode only
