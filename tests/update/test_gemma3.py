"""The update on Gemma 3's image prompts: loss and gradients equal the float64 formula over plain HF forwards.

A random tiny Gemma 3 (tests/vision/random_vlms.py, loaded by ``load_policy``: its tower frozen) in float64 with its
norms in float64, 2 image prompts (1 and 2 images, 54 and 62 tokens: longer than its 10-position window) x G = 3
completions, over several micro-batches. The reference: TRL's loss formula on each row's log-probs from its own
forward with its prompt's pixels and ``token_type_ids`` (transformers builds the image blocks and windows from them).
Ours: the shared path (our masks: :mod:`infgrpo.vision.masks`) and the unshared rows (``token_type_ids`` passed), to
1e-10; without the image blocks or the window the shared path's gradients move, and without the token types the
unshared rows'. (The loss of a first iteration is the same whatever the log-probs: ratio 1, and a KL of 0 to a
reference equal to the policy; the gradients are not.)
"""

import copy

import pytest
import torch

import infgrpo.update.shared_prompt.forward as shared_forward
import infgrpo.vision.features as features
import infgrpo.vision.masks as masks
from infgrpo.vision.inputs import VisionInputs
from infgrpo.vision.parts import freeze_vision
from infgrpo.vision.processor import load_processor
from tests.algo.trl_reference import TRLLoss
from tests.helpers import ALLOW_OBJECTIVE_WARNINGS, float64_norms
from tests.sampler.engine.test_gemma3 import no_blocks, no_window
from tests.update.test_images import ADVANTAGES, COMPLETIONS, MAX_LEN, OBJECTIVE, TEXTS, G, ours, right_padded
from tests.vision.conftest import images as draw_images
from tests.vision.rendered import tiny_vlm


@pytest.fixture(scope="module")
def parts(random_vlm_folder):
    """(model and a frozen copy as the KL reference, float64 norms; processor; messages; ids; VisionInputs)."""
    model, name = tiny_vlm("gemma3", random_vlm_folder)
    processor = load_processor(name)
    assert freeze_vision(model) > 0
    messages, ids, visions = [], [], []
    for k, text in enumerate(TEXTS):
        blocks = [{"type": "image", "image": im} for im in draw_images(k + 1, seed=k)]
        blocks.append({"type": "text", "text": text})
        messages.append([{"role": "user", "content": blocks}])
        out = processor.apply_chat_template(
            messages[-1], add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
        ids.append(out["input_ids"][0].tolist())
        visions.append(VisionInputs.from_processor(out, processor.family, processor.image_token_id))
    model = float64_norms(model)
    ref = float64_norms(copy.deepcopy(model)).eval().requires_grad_(False)
    return model, ref, processor, messages, ids, visions


def float64_rows(model, processor, messages):
    """Each row's log-probs and entropies (n, C) from its own forward with its prompt's pixels and token types (zeros
    over the completion), and the completion mask."""
    logps, ents = [], []
    for row, completion in enumerate(COMPLETIONS):
        out = processor.apply_chat_template(
            messages[row // G], add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
        tail = torch.tensor([completion])
        full = torch.cat([out["input_ids"], tail], dim=1)
        types = torch.cat([out["token_type_ids"], torch.zeros_like(tail)], dim=1)
        logits = model(input_ids=full, pixel_values=out["pixel_values"], token_type_ids=types).logits
        lp = torch.log_softmax(logits[0, out["input_ids"].shape[1] - 1 : -1], dim=-1)
        logps.append(lp.gather(-1, tail[0, :, None])[:, 0])
        ents.append(-(lp.exp() * lp).sum(-1))
    pad = lambda xs: torch.stack([torch.cat([x, x.new_zeros(MAX_LEN - len(x))]) for x in xs])  # noqa: E731
    return pad(logps), pad(ents), right_padded([[1] * len(c) for c in COMPLETIONS] + [[0] * MAX_LEN])[:-1].double()


def reference(model, ref, processor, messages):
    """The float64 formula's loss and gradients (TRL's loss on the rows' log-probs)."""
    logp, ent, mask = float64_rows(model.train(), processor, messages)
    with torch.no_grad():
        ref_logp = float64_rows(ref, processor, messages)[0]
    model.zero_grad(set_to_none=True)
    loss = TRLLoss(OBJECTIVE, MAX_LEN)(
        logp, ent, torch.tensor(ADVANTAGES, dtype=torch.float64), mask, mask.sum().item(), ref=ref_logp
    )
    loss.backward()
    return loss.item(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@ALLOW_OBJECTIVE_WARNINGS
@pytest.mark.parametrize("budget,share", [(120, True), (150, False)])
def test_the_update_equals_the_float64_formula_to_1e_10(parts, budget, share):
    model, ref, processor, messages, ids, visions = parts
    loss, want = reference(model, ref, processor, messages)
    got, result, seen = ours(model, ref, ids, visions, budget, share)
    assert result.stats["micro_batches"] >= 2
    assert seen == (3, 3)  # the frozen towers' features kept for the step: each image once a model
    assert result.stats["loss"] == pytest.approx(loss, rel=1e-10, abs=1e-14)
    assert want.keys() == got.keys() and not any("vision_tower" in k for k in got) and len(got) > 10
    for k, g in want.items():
        assert (got[k] - g).abs().max() <= 1e-10 * max(g.abs().max().item(), 1.0), k


@ALLOW_OBJECTIVE_WARNINGS
@pytest.mark.parametrize("drop", ["image blocks", "window", "token types"])
def test_each_mask_is_load_bearing(parts, drop, monkeypatch):
    """The shared path without its image blocks or its window, the unshared rows without their token types (from
    which the model builds both): the gradients move."""
    model, ref, processor, messages, ids, visions = parts
    _, want = reference(model, ref, processor, messages)
    if drop == "image blocks":
        monkeypatch.setattr(shared_forward, "image_blocks", no_blocks)
    elif drop == "window":
        monkeypatch.setattr(masks, "within_window", no_window)
    else:
        monkeypatch.setattr(features, "block_types", lambda *args: {})
    got, _, _ = ours(model, ref, ids, visions, 150 if drop == "token types" else 120, drop != "token types")
    assert max((got[k] - g).abs().max().item() / max(g.abs().max().item(), 1.0) for k, g in want.items()) > 1e-4
