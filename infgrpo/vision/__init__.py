"""Images in GRPO: vision-language models' processors, inputs, positions and features, each image once per prompt.

    from infgrpo.vision.processor import load_processor
    processor = load_processor("tiny-vl")          # the shipped tiny Qwen2.5-VL's processor (PIL, no torchvision)

The room sits on the floor of ``data/``, ``policy/`` and ``sampler/``, which import it; it imports only the floors
below and transformers. See docs/architecture.md, "Vision-language GRPO (#62's design)".
"""
