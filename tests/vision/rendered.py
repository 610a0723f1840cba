"""Image prompts of the shapes task as the processor renders them, and the tiny VLMs the vision tests load::

rendered = render_questions(processor, QUESTIONS, random.Random(0))   # [(ids, VisionInputs or None, out), ...]
model, name = tiny_vlm("qwen3_vl", random_vlm_folder)                  # shipped, or a random one of its family
"""

import random

import torch
from transformers import AutoModelForImageTextToText

from infgrpo.assets import resolve_model_path
from infgrpo.assets.shapes import draw, sample_scene
from infgrpo.assets.tiny_vlm import FAMILIES
from infgrpo.policy.load import load_policy
from infgrpo.vision.inputs import VisionInputs


def render_questions(processor, questions, rng: random.Random) -> list[tuple]:
    """Each ``(n, text)`` of ``questions`` as one user message with ``n`` images drawn by ``rng`` (each scene apart)
    before its text: (its ids, its VisionInputs or None, the processor's answer)."""
    rendered = []
    for n, text in questions:
        blocks = [{"type": "image", "image": draw(sample_scene(rng))} for _ in range(n)]
        messages = [{"role": "user", "content": [*blocks, {"type": "text", "text": text}]}]
        out = processor.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
        vision = VisionInputs.from_processor(out, processor.family, processor.image_token_id) if n else None
        rendered.append((out["input_ids"][0].tolist(), vision, out))
    return rendered


def tiny_vlm(param: str, random_vlm_folder) -> tuple:
    """(the model in float64, the name its processor loads from): a random one of a recipe family (``BUILT``, Gemma 3:
    through ``load_policy``), else the shipped one (an alias) as HF's ``from_pretrained`` loads it."""
    if param in FAMILIES:
        name = random_vlm_folder(param)
        return load_policy(name, "float64"), name
    return AutoModelForImageTextToText.from_pretrained(resolve_model_path(param), dtype=torch.float64), param
