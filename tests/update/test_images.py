"""The update on image prompts: TRL 1.16's loss and gradients, each prompt's images through the tower once a pass.

The shipped ``tiny-vl`` (Qwen2.5-VL) in float64, every parameter trainable (TRL's ``all-linear`` trains the vision
tower too), 2 image prompts x G = 3 completions; a random tiny Qwen3-VL with its tower frozen on the shared path.
Two references:

- TRL itself: its ``_compute_loss`` with its own ``_get_per_token_logps_and_entropies`` (the fused LM head TRL adds,
  which accumulates in float32), on the inputs TRL builds (the processor over the B x G rendered prompts, the pixels
  G times, ``mm_token_type_ids`` extended over the completions): ~1e-5 relative.
- the same formula (TRL's loss on given tensors) in float64 over log-probs of one model forward per row with its
  pixels (the model's own positions), RMSNorms in float64: 1e-10. The vision tower is frozen there (infgrpo's default,
  ``model.policy.train_vision_tower: false``): its rotary step casts to float32, so a tower gradient summed over the
  G rows before it (one encoder pass) rather than after (G passes) differs at float32 rounding (~1e-8 relative).

Ours: the update on several micro-batches, prompts shared or not, the reference pass (``beta > 0``) included. The
float64 reference runs on random tiny Qwen2-VL and Qwen3-VL too (tests/vision/random_vlms.py, loaded by
``load_policy``): their frozen towers' features (Qwen3-VL's DeepStack features with them) kept for the step.
"""

import contextlib
import copy
import random

import pytest
import torch
from trl.data_utils import apply_chat_template
from trl.trainer.utils import add_fused_lm_head

from infgrpo.algo import Objective
from infgrpo.assets.shapes import draw, sample_scene
from infgrpo.sampler import Rollouts
from infgrpo.update.config import UpdateConfig
from infgrpo.update.runner import PolicyUpdate
from infgrpo.vision.features import forget_features
from infgrpo.vision.inputs import VisionInputs
from infgrpo.vision.parts import freeze_vision
from infgrpo.vision.processor import load_processor
from tests.algo.trl_reference import TRLLoss
from tests.helpers import ALLOW_OBJECTIVE_WARNINGS, float64_norms
from tests.sampler.engine.test_images import count_images
from tests.vision.random_vlms import BUILT
from tests.vision.rendered import tiny_vlm

G, MAX_LEN, EOS = 3, 8, 2
TEXTS = ("colours, left to right?", "how many shapes?")
COMPLETIONS = [[74, 84, 93, 2], [26, 2], [74, 84, 77, 8, 79, 90, 77, 2], [25, 2], [26, 84, 2], [27, 80, 81, 82, 83]]
ADVANTAGES = [1.0, -0.5, -0.5, 0.8, -1.1, 0.3]
OBJECTIVE = Objective(loss_type="dapo", beta=0.04)


@pytest.fixture(scope="module", params=("tiny-vl", *BUILT))
def parts(request, random_vlm_folder):
    """(model, a frozen copy as the KL reference, processor, the prompts' messages and images, ids, VisionInputs):
    ``tiny-vl`` with every parameter trainable, a random Qwen2-VL or Qwen3-VL as ``load_policy`` loads it (the
    vision side frozen)."""
    model, name = tiny_vlm(request.param, random_vlm_folder)
    processor = load_processor(name)
    rng = random.Random(3)
    messages, images, ids, visions = [], [], [], []
    for k, text in enumerate(TEXTS):
        imgs = [draw(sample_scene(rng)) for _ in range(k + 1)]  # 1 and 2 images
        blocks = [{"type": "image", "image": im} for im in imgs] + [{"type": "text", "text": text}]
        message = [{"role": "user", "content": blocks}]
        out = processor.apply_chat_template(
            message, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
        messages.append(message), images.append(imgs), ids.append(out["input_ids"][0].tolist())
        visions.append(VisionInputs.from_processor(out, processor.family, processor.image_token_id))
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    return model, ref, processor, messages, images, ids, visions


def rollouts(ids, visions):
    logprobs = [torch.zeros(len(c)) for c in COMPLETIONS]
    finish = ["stop" if c[-1] == EOS else "length" for c in COMPLETIONS]
    return Rollouts(ids, G, COMPLETIONS, logprobs, finish, vision=visions)


def ours(model, ref, ids, visions, budget, share):
    """The gradients of one update, its result, and the images the vision tower encoded."""
    grads = {}
    keep = lambda: grads.update({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})  # noqa: E731
    config = UpdateConfig(token_budget=budget, skip_zero_advantage="off")  # beta > 0: no row is skipped anyway
    updater = PolicyUpdate(config, OBJECTIVE, max_completion_length=MAX_LEN, share_prompt=share)
    forget_features(visions)  # a new step: nothing kept from an earlier test's models
    (seen, hook), (seen_ref, hook_ref) = count_images(model), count_images(ref)
    try:
        result = updater.run(
            model.train(), rollouts(ids, visions), torch.tensor(ADVANTAGES, dtype=torch.float64),
            lambda x: x.backward(), keep, lambda: model.zero_grad(set_to_none=True), ref_model=ref,
        )  # fmt: skip
    finally:
        hook.remove(), hook_ref.remove()
    return grads, result, (sum(seen), sum(seen_ref))


def right_padded(rows, value=0):
    width = max(map(len, rows))
    return torch.tensor([r + [value] * (width - len(r)) for r in rows])


def trl_inputs(processor, messages, images, ids):
    """What TRL 1.16's ``_generate_and_score_completions`` hands ``_compute_loss`` for B x G rows (the processor
    over the rendered prompts, each G times; the completion mask up to and with EOS)."""
    rows = [i for i in range(len(messages)) for _ in range(G)]
    texts = [apply_chat_template({"prompt": messages[i]}, processor)["prompt"] for i in rows]
    out = processor(images=[images[i] for i in rows], text=texts, padding=True, return_tensors="pt")
    completion_ids = right_padded(COMPLETIONS)
    mask = right_padded([[1] * len(c) for c in COMPLETIONS])
    real = [r[m.bool()].tolist() for r, m in zip(out["input_ids"], out["attention_mask"], strict=True)]
    assert real == [ids[i] for i in rows]  # TRL's prompt ids are ours
    types = torch.cat([out["mm_token_type_ids"], torch.zeros_like(completion_ids)], dim=1)
    return {
        "prompt_ids": out["input_ids"], "prompt_mask": out["attention_mask"], "completion_ids": completion_ids,
        "completion_mask": mask, "pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"],
        "num_images": [len(images[i]) for i in rows], "mm_token_type_ids": types,
    }  # fmt: skip


@ALLOW_OBJECTIVE_WARNINGS
@pytest.mark.parametrize(
    "parts,budget,share",
    [("tiny-vl", 10_000, True), ("tiny-vl", 120, True), ("tiny-vl", 150, False), ("qwen3_vl", 120, True)],
    indirect=["parts"],
)  # tiny-vl trains its tower on both sides (TRL's all-linear); Qwen3-VL as load_policy loads it (frozen)
def test_the_update_equals_trls_compute_loss_on_image_prompts(parts, budget, share):
    model, ref, processor, messages, images, ids, visions = parts
    patched = copy.deepcopy(model)  # TRL's fused LM head on a copy of the same weights
    patched_ref = copy.deepcopy(ref)
    for m in (patched, patched_ref):
        add_fused_lm_head(m, temperature=1.0, outputs=("log_probs", "entropy"))
    trl = TRLLoss(OBJECTIVE, MAX_LEN)
    trl.trainer.accelerator.autocast = contextlib.nullcontext  # one process, no mixed precision
    inputs = trl_inputs(processor, messages, images, ids)
    mask = inputs["completion_mask"]
    per_token = trl.trainer_class._get_per_token_logps_and_entropies.__wrapped__  # TRL's own, without its profiler
    logits_to_keep = inputs["completion_ids"].shape[1]
    forward = {k: inputs[k] for k in ("pixel_values", "image_grid_thw", "num_images", "mm_token_type_ids")}
    ids_all = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], mask], dim=1)
    with torch.no_grad():
        ref_logp, _, _ = per_token(trl.trainer, patched_ref, ids_all, attention, logits_to_keep, **forward)
    logp, ent, _ = per_token(trl.trainer, patched.train(), ids_all, attention, logits_to_keep, compute_entropy=True,
                             **forward)  # fmt: skip
    loss = trl(logp, ent, torch.tensor(ADVANTAGES, dtype=torch.float64), mask.double(), mask.sum().item(),
               ref=ref_logp)  # fmt: skip
    loss.backward()
    want = {k: p.grad for k, p in patched.named_parameters() if p.grad is not None}
    got, result, seen = ours(model, ref, ids, visions, budget, share)
    if budget < 10_000:
        assert result.stats["micro_batches"] >= 2
    assert result.stats["loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert result.stats["kl"] == pytest.approx(trl.metrics["kl"][-1], rel=1e-4, abs=1e-9)
    trained_tower = any("visual" in k for k in got)
    assert want.keys() == got.keys() and trained_tower == any(p.requires_grad for p in model.model.visual.parameters())
    for k, g in want.items():
        assert (got[k] - g).abs().max() <= 1e-5 * max(g.abs().max().item(), 1e-3), k
    # the tower, a pass of the policy (its tower trains: no reuse): shared prompts, the 3 images once however many
    # micro-batches; unshared rows, each prompt's images once per micro-batch holding its rows. The frozen reference:
    # each image once, its features reused by every micro-batch. TRL's: 3 x G each
    images = sum(v.num_images for v in visions)
    if not trained_tower:  # frozen: the policy's features kept for the step too
        assert seen == (images, images)
        return
    updater = PolicyUpdate(UpdateConfig(token_budget=budget), share_prompt=share, max_completion_length=MAX_LEN)
    mbs = updater.pack(rollouts(ids, visions), budget)
    per_pass = images if share else sum(v.num_images for mb in mbs for v in {id(v): v for v in mb.visions}.values())
    assert seen == (per_pass, images) and per_pass < images * G
    assert share or per_pass > images  # unshared: the policy's pass encodes a prompt in several micro-batches


def float64_rows(model, processor, messages, images):
    """TRL's inputs for the float64 formula: each row's log-probs and entropies from its own forward with its
    prompt's pixels (the model's own positions), (n, C) each, and the completion mask."""
    logps, ents = [], []
    for row, completion in enumerate(COMPLETIONS):
        i = row // G
        out = processor.apply_chat_template(
            messages[i], add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
        tail = torch.tensor([completion])
        kwargs = {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask", "mm_token_type_ids")}
        full = torch.cat([out["input_ids"], tail], dim=1)
        types = torch.cat([out["mm_token_type_ids"], torch.zeros_like(tail)], dim=1)
        model.model.rope_deltas = None
        logits = model(input_ids=full, attention_mask=torch.ones_like(full), mm_token_type_ids=types, **kwargs).logits
        lp = torch.log_softmax(logits[0, out["input_ids"].shape[1] - 1 : -1], dim=-1)
        logps.append(lp.gather(-1, tail[0, :, None])[:, 0])
        ents.append(-(lp.exp() * lp).sum(-1))
    pad = lambda xs: torch.stack([torch.cat([x, x.new_zeros(MAX_LEN - len(x))]) for x in xs])  # noqa: E731
    return pad(logps), pad(ents), right_padded([[1] * len(c) for c in COMPLETIONS] + [[0] * MAX_LEN])[:-1].double()


@ALLOW_OBJECTIVE_WARNINGS
@pytest.mark.parametrize("budget,share", [(120, True), (150, False)])
def test_the_update_equals_the_float64_formula_to_1e_10(parts, budget, share):
    model, ref, processor, messages, images, ids, visions = parts
    model, ref = float64_norms(copy.deepcopy(model)), float64_norms(copy.deepcopy(ref))
    assert freeze_vision(model) > 0  # the tower computes its rotary step in float32 (module docstring)
    logp, ent, mask = float64_rows(model.train(), processor, messages, images)
    with torch.no_grad():
        ref_logp = float64_rows(ref, processor, messages, images)[0]
    trl = TRLLoss(OBJECTIVE, MAX_LEN)
    model.zero_grad(set_to_none=True)
    loss = trl(logp, ent, torch.tensor(ADVANTAGES, dtype=torch.float64), mask, mask.sum().item(), ref=ref_logp)
    loss.backward()
    want = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    got, result, seen = ours(model, ref, ids, visions, budget, share)
    assert result.stats["micro_batches"] >= 2
    images = sum(v.num_images for v in visions)
    assert seen == (images, images)  # the frozen towers' features kept for the step: each image once a model
    assert result.stats["loss"] == pytest.approx(loss.item(), rel=1e-10, abs=1e-14)
    assert want.keys() == got.keys() and not any("visual" in k for k in got)
    for k, g in want.items():
        assert (got[k] - g).abs().max() <= 1e-10 * max(g.abs().max().item(), 1.0), k
