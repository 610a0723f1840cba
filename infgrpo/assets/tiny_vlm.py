"""The recipe of the tiny vision-language models: tokenizer, chat template, configs and processor files.

    tok = vlm_tokenizer("qwen2_5_vl")                  # the character tokenizer + Qwen's image tokens
    config = tiny_vlm_config("qwen2_5_vl", tok)        # a Qwen2.5-VL of ~0.6M parameters, 7-pixel patches
    write_processor_files("qwen2_5_vl", tok, folder)   # the stock processor files, written without torchvision

Four families, each the shipped ``tiny`` text model's size (4 layers, hidden 128) with a small vision tower (2
layers); the first two ship warm-started, the Qwen2-VL and Qwen3-VL recipes are built with random weights by the tests:

- ``qwen2_5_vl`` (``tiny-vl``): Qwen2.5-VL with M-RoPE, 7-pixel patches merged 2 x 2, so a 56 x 56 image of the
  shapes task (:mod:`infgrpo.assets.shapes`) is 16 ``<|image_pad|>`` tokens, one per 14-pixel cell;
- ``idefics3`` (``tiny-idefics3``, SmolVLM's family): a Llama text model with 1D positions, a SigLIP tower on 56-pixel
  images in 7-pixel patches, pixel-shuffled by 2: 16 ``<image>`` tokens an image, no image splitting;
- ``qwen2_vl``: Qwen2-VL, the same grid and tokens as Qwen2.5-VL (a tower without windowed attention);
- ``qwen3_vl``: Qwen3-VL, the same grid and tokens, interleaved M-RoPE, a learned 8 x 8 patch-position grid and
  DeepStack (both tower layers' features added to the first two text layers' image positions);
- ``gemma3``: Gemma 3 with 1D positions, a SigLIP tower on 56-pixel images in 7-pixel patches average-pooled to 16
  ``<image_soft_token>`` tokens an image (between ``<start_of_image>`` and ``<end_of_image>``), which attend to each
  other both ways; its text layers alternate sliding-window (a window of :data:`GEMMA3_WINDOW` positions, shorter
  than an image prompt) and full attention, and its template is Gemma 3's (``<bos>``, ``<start_of_turn>user``, the
  assistant's turn named ``model``, ``<end_of_turn>`` the EOS).

The processor files are those transformers' stock processors read and write (``processor_config.json`` naming the
processor class, the image processor's ``preprocessor_config.json``, Qwen's ``video_preprocessor_config.json``, the
tokenizer, ``chat_template.jinja``); they are written from their parts, because transformers 5.x builds a Qwen-VL
processor only with a video processor, which needs torchvision (:mod:`infgrpo.vision.processor` loads them either
way). ``tools/build_tiny_vlms.py`` builds and warm-starts the models; this module only describes them.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import (
    Gemma3Config,
    Idefics3Config,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2VLConfig,
    Qwen3VLConfig,
)

from infgrpo.assets.tokenizer import build_tokenizer

QWEN = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
"""The Qwen-VL families: one tokenizer and template, M-RoPE, 7-pixel patches merged 2 x 2 (16 tokens an image)."""
FAMILIES = ("qwen2_5_vl", "idefics3", *(f for f in QWEN if f != "qwen2_5_vl"), "gemma3")
"""Shipped (``tiny-vl``, ``tiny-idefics3``), then built by the tests only (random weights: Qwen2-VL, Qwen3-VL,
Gemma 3)."""
_QWEN_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
IMAGE_TOKENS = {f: _QWEN_TOKENS for f in QWEN} | {
    "idefics3": ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"],
    "gemma3": ["<start_of_image>", "<end_of_image>", "<image_soft_token>"],
}
"""The special tokens each family's processor writes around and for an image."""
IMAGE_BLOCK = {f: "<|vision_start|><|image_pad|><|vision_end|>" for f in QWEN} | {
    "idefics3": "<image>",
    "gemma3": "<start_of_image>",
}
"""What the chat template writes for one ``{"type": "image"}`` block (the processor expands it)."""
PROCESSOR_CLASS = {
    "qwen2_vl": ("Qwen2VLProcessor", "Qwen2VLVideoProcessor"),
    "qwen2_5_vl": ("Qwen2_5_VLProcessor", "Qwen2VLVideoProcessor"),
    "qwen3_vl": ("Qwen3VLProcessor", "Qwen3VLVideoProcessor"),
}
"""The stock processor and video processor classes each Qwen family's hub files name."""
PATCH, MERGE, IMAGE_SIDE, IMAGE_TOKENS_EACH = 7, 2, 56, 16
GEMMA3_WINDOW = 10
"""The tiny Gemma 3's sliding window: fewer positions than an image (16 tokens) or a prompt, so the tests' sequences
cross it in every forward."""
GEMMA3_TURNS = ["<bos>", "<start_of_turn>", "<end_of_turn>"]
"""Gemma 3's sequence and turn markers (``<end_of_turn>`` is its EOS)."""


def gemma3_template() -> str:
    """Gemma 3's chat template, as its hub files write it: ``<bos>``, turns ``<start_of_turn>{role}``, the assistant
    named ``model``, a system message folded into the first user turn, text blocks trimmed, ``<start_of_image>``
    for an image block (the processor expands it)."""
    return (
        "{{ bos_token }}"
        "{% if messages[0]['role'] == 'system' %}"
        "{% set first = (messages[0]['content'] if messages[0]['content'] is string "
        "else messages[0]['content'][0]['text']) + '\n\n' %}{% set rest = messages[1:] %}"
        "{% else %}{% set first = '' %}{% set rest = messages %}{% endif %}"
        "{% for message in rest %}"
        "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
        "{{ '<start_of_turn>' + role + '\n' + (first if loop.first else '') }}"
        "{% if message['content'] is string %}{{ message['content'] | trim }}"
        "{% else %}{% for block in message['content'] %}"
        "{% if block['type'] == 'image' %}{{ '<start_of_image>' }}"
        "{% elif block['type'] == 'text' %}{{ block['text'] | trim }}{% endif %}"
        "{% endfor %}{% endif %}{{ '<end_of_turn>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
    )


def chat_template(family: str) -> str:
    """A ChatML template that renders string contents and TRL's content blocks (text, and the family's image
    placeholder for an image block)."""
    image = IMAGE_BLOCK[family]
    return (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for block in message['content'] %}"
        f"{{% if block['type'] == 'image' %}}{{{{ '{image}' }}}}"
        "{% elif block['type'] == 'text' %}{{ block['text'] }}{% endif %}"
        "{% endfor %}{% endif %}{{ '<|im_end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )


def vlm_tokenizer(family: str) -> PreTrainedTokenizerFast:
    """The tiny character tokenizer with ``family``'s image tokens (special) and its chat template (Gemma 3: its
    turn markers too, ``<bos>`` as BOS, ``<end_of_turn>`` as EOS, and the named image tokens its processor reads:
    ``boi_token``, ``eoi_token``, ``image_token``)."""
    tok = build_tokenizer()
    if family == "gemma3":
        tok.add_special_tokens({"additional_special_tokens": GEMMA3_TURNS + IMAGE_TOKENS[family]})
        tok.add_tokens(["model"])  # the assistant's role, one token as the other roles are
        boi, eoi, image = IMAGE_TOKENS[family]
        tok = PreTrainedTokenizerFast(
            tokenizer_object=tok.backend_tokenizer, bos_token="<bos>", eos_token="<end_of_turn>",
            pad_token=tok.pad_token, unk_token=tok.unk_token, model_max_length=tok.model_max_length,
            extra_special_tokens={"boi_token": boi, "eoi_token": eoi, "image_token": image},
        )  # fmt: skip
        tok.chat_template = gemma3_template()
        return tok
    tok.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS[family]})
    tok.chat_template = chat_template(family)
    return tok


def tiny_vlm_config(family: str, tokenizer: PreTrainedTokenizerFast) -> PretrainedConfig:
    """The tiny architecture of ``family`` over ``tokenizer``'s vocabulary (see the module docstring)."""
    ids = tokenizer.convert_tokens_to_ids
    text = dict(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
        tie_word_embeddings=True,
    )  # fmt: skip
    if family in QWEN:
        tokens = dict(
            image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
            vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
            tie_word_embeddings=True,
        )  # fmt: skip
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]}
    if family == "qwen2_vl":
        vision = dict(
            depth=2, embed_dim=64, hidden_size=128, mlp_ratio=2, num_heads=2, patch_size=PATCH,
            spatial_merge_size=MERGE, temporal_patch_size=2,
        )  # fmt: skip
        return Qwen2VLConfig(text_config=text, vision_config=vision, **tokens)
    if family == "qwen3_vl":
        # Qwen3-VL: interleaved M-RoPE (sections of 16 frequencies, as the stock 24/20/20 of 64), a learned position
        # grid of 8 x 8 patches (a 56-pixel image), and DeepStack: both tower layers' features added to the first two
        # text layers' image positions
        text["rope_parameters"] |= {"mrope_section": [6, 5, 5], "mrope_interleaved": True}
        text["head_dim"] = 32
        vision = dict(
            depth=2, hidden_size=64, intermediate_size=128, num_heads=2, patch_size=PATCH, spatial_merge_size=MERGE,
            temporal_patch_size=2, out_hidden_size=128, num_position_embeddings=(IMAGE_SIDE // PATCH) ** 2,
            deepstack_visual_indexes=[0, 1],
        )  # fmt: skip
        return Qwen3VLConfig(text_config=text, vision_config=vision, **tokens)
    if family == "qwen2_5_vl":
        vision = dict(
            depth=2, hidden_size=64, intermediate_size=128, num_heads=2, patch_size=PATCH, spatial_merge_size=MERGE,
            temporal_patch_size=2, window_size=2 * MERGE * PATCH, out_hidden_size=128, fullatt_block_indexes=[1],
        )  # fmt: skip
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **tokens)
    if family == "idefics3":
        text["model_type"] = "llama"
        vision = dict(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            image_size=IMAGE_SIDE, patch_size=PATCH,
        )  # fmt: skip
        return Idefics3Config(
            text_config=text, vision_config=vision, scale_factor=MERGE, image_token_id=ids("<image>"),
            tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
    if family == "gemma3":
        # 4 text layers, sliding-window and full in turn (each with its own rotary base, as Gemma 3's local and
        # global layers), a window shorter than an image; 56-pixel images in 7-pixel patches (8 x 8), pooled 2 x 2
        text |= dict(
            head_dim=32, query_pre_attn_scalar=32, sliding_window=GEMMA3_WINDOW, bos_token_id=tokenizer.bos_token_id,
            layer_types=["sliding_attention", "full_attention"] * 2,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1000.0},
            },
        )  # fmt: skip
        vision = dict(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            image_size=IMAGE_SIDE, patch_size=PATCH,
        )  # fmt: skip
        boi, eoi, image = ids(IMAGE_TOKENS[family])
        return Gemma3Config(
            text_config=text, vision_config=vision, mm_tokens_per_image=IMAGE_TOKENS_EACH, boi_token_index=boi,
            eoi_token_index=eoi, image_token_index=image, tie_word_embeddings=True,
        )  # fmt: skip
    raise ValueError(f"family={family!r}; valid: {', '.join(FAMILIES)}")


def write_processor_files(family: str, tokenizer: PreTrainedTokenizerFast, folder: Path) -> None:
    """Writes ``family``'s stock processor files into ``folder`` (module docstring), images of 56 x 56 pixels."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(tokenizer.chat_template)
    side = IMAGE_SIDE * IMAGE_SIDE
    if family in QWEN:  # Qwen3-VL's processor takes Qwen2-VL's image processor too
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        processor, video_processor = PROCESSOR_CLASS[family]
        grid = {"patch_size": PATCH, "temporal_patch_size": 2, "merge_size": MERGE}
        Qwen2VLImageProcessorPil(min_pixels=side, max_pixels=side, **grid).save_pretrained(folder)
        video = {"video_processor_type": video_processor, "size": {"shortest_edge": side, "longest_edge": side}}
        _write_json(folder / "video_preprocessor_config.json", video | grid)
        _write_json(folder / "processor_config.json", {"processor_class": processor})
    elif family == "idefics3":
        from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

        edge = {"longest_edge": IMAGE_SIDE}
        Idefics3ImageProcessorPil(size=edge, max_image_size=edge, do_image_splitting=False).save_pretrained(folder)
        _write_json(folder / "processor_config.json", {"processor_class": "Idefics3Processor", "image_seq_len": 16})
    elif family == "gemma3":
        from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

        Gemma3ImageProcessorPil(size={"height": IMAGE_SIDE, "width": IMAGE_SIDE}).save_pretrained(folder)
        processor = {"processor_class": "Gemma3Processor", "image_seq_length": IMAGE_TOKENS_EACH}
        _write_json(folder / "processor_config.json", processor)
    else:
        raise ValueError(f"family={family!r}; valid: {', '.join(FAMILIES)}")
    # the image processor's own file names the processor too (transformers reads either)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    config["processor_class"] = json.loads((folder / "processor_config.json").read_text())["processor_class"]
    _write_json(folder / "preprocessor_config.json", config)


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
