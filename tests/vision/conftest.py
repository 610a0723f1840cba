"""Tiny random vision-language models of every recipe family, in float64, built once a session."""

import random

import pytest
import torch
from transformers import AutoModelForImageTextToText

from infgrpo.assets.shapes import draw, sample_scene
from infgrpo.assets.tiny_vlm import FAMILIES
from infgrpo.vision.inputs import VisionInputs
from infgrpo.vision.processor import load_processor


@pytest.fixture(scope="session", params=FAMILIES)
def vlm(request, tmp_path_factory):
    """(model in float64, eval, every parameter trainable; its processor) of one family: random weights
    (tests/vision/random_vlms.py), saved and loaded back through load_processor."""
    from tests.vision.random_vlms import build_random_vlm

    folder = build_random_vlm(request.param, tmp_path_factory.mktemp(request.param))
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float64).eval()
    return model, load_processor(str(folder))


def images(n: int, seed: int) -> list:
    rng = random.Random(seed)
    return [draw(sample_scene(rng)) for _ in range(n)]


def render(processor, n_images: int, text: str, seed: int = 0):
    """(prompt ids, VisionInputs or None) of one user message with ``n_images`` shapes images before ``text``."""
    blocks = [{"type": "image", "image": im} for im in images(n_images, seed)] + [{"type": "text", "text": text}]
    out = processor.apply_chat_template(
        [{"role": "user", "content": blocks}], add_generation_prompt=True, tokenize=True, return_dict=True,
        return_tensors="pt",
    )  # fmt: skip
    vision = VisionInputs.from_processor(out, processor.family, processor.image_token_id) if n_images else None
    return out["input_ids"][0].tolist(), vision, out


__all__ = ["images", "render"]
