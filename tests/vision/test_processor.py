"""Gemma 3's processor through ``load_processor``: the stock class over the PIL image processor, no torchvision."""

import random

from infgrpo.vision.processor import load_processor
from tests.vision.rendered import render_questions


def test_gemma3s_processor_loads_without_torchvision_and_counts_its_images(random_vlm_folder):
    processor = load_processor(random_vlm_folder("gemma3"))
    assert type(processor).__name__ == "Gemma3Processor" and processor.family.name == "gemma3"
    assert type(processor.image_processor).__name__ == "Gemma3ImageProcessorPil"  # PIL: no torchvision needed
    assert not hasattr(processor, "video_processor")  # Gemma 3 has no video part: nothing to build without
    questions = ((2, "how many?"), (0, "hi"))
    (ids, vision, out), (text_ids, none, _) = render_questions(processor, questions, random.Random(0))
    # the processor names its start-of-image token image_token_id; the image tokens are the 16 soft tokens an image
    assert vision.num_images == 2 and vision.image_tokens == 32 == ids.count(processor.tokenizer.image_token_id)
    assert ids[0] == text_ids[0] == processor.tokenizer.bos_token_id and none is None  # <bos>, from the template
    assert ids.count(processor.tokenizer.bos_token_id) == 1 and out["pixel_values"].shape == (2, 3, 56, 56)
