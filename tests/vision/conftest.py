"""Tiny random vision-language models of both families, in float64, built from the shipped recipe once a session."""

import random

import pytest
import torch
from transformers import AutoModelForImageTextToText

from infgrpo.assets.shapes import draw, sample_scene
from infgrpo.assets.tiny_vlm import tiny_vlm_config, vlm_tokenizer, write_processor_files
from infgrpo.vision.inputs import VisionInputs
from infgrpo.vision.processor import load_processor

FAMILIES = ("qwen2_5_vl", "idefics3")


@pytest.fixture(scope="session", params=FAMILIES)
def vlm(request, tmp_path_factory):
    """(model in float64, eval; its processor) of one family: random weights at initializer_range 0.2 (a random tiny
    VLM at 0.02 can ignore the image), saved and loaded back through load_processor."""
    family = request.param
    folder = tmp_path_factory.mktemp(family)
    tok = vlm_tokenizer(family)
    config = tiny_vlm_config(family, tok)
    config.initializer_range = config.get_text_config().initializer_range = 0.2
    config.vision_config.initializer_range = 0.2
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config)
    model.save_pretrained(folder)
    write_processor_files(family, tok, folder)
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
