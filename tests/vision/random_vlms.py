"""Tiny random vision-language models of any recipe family, written to a folder as a hub checkpoint is::

    folder = build_random_vlm("qwen3_vl", tmp_path)      # config, random weights, tokenizer, processor files
    model, processor = load_policy(str(folder), "float64"), load_processor(str(folder))

The families the project ships (``tiny-vl``, ``tiny-idefics3``) were warm-started on the shapes task; the others
(Qwen2-VL, Qwen3-VL) exist only here: the recipe of :mod:`infgrpo.assets.tiny_vlm` with random weights, built in about
a second and loaded back through infgrpo's own loaders. Two choices make a random model test what a trained one does:

- ``initializer_range=0.2`` (a random tiny VLM at 0.02 can ignore the image: one answer for every prompt; Gemma 3
  initializes its projector's matrix to zeros, which would blank every image: it is drawn at the same scale; and it
  scales its embeddings by sqrt(hidden), so through a head tied to them a random model repeats its last input token:
  its head is untied);
- the end-of-turn token's row (``<|im_end|>``, tied to its embedding) set along a random direction at twice the rows'
  mean norm, so greedy answers end after a few to twenty tokens, as a trained model's do: the resumed tool turns of
  the engine's tests need answers that end.
"""

from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText

from infgrpo.assets.tiny_vlm import tiny_vlm_config, vlm_tokenizer, write_processor_files

BUILT = ("qwen2_vl", "qwen3_vl")
"""The recipe families no shipped model covers (and the M-RoPE tests run on); Gemma 3 (``gemma3``) too, with tests of
its own masks (tests/sampler/engine/test_gemma3.py, tests/update/test_gemma3.py)."""


def build_random_vlm(family: str, folder: Path, seed: int = 0) -> Path:
    """Writes a random tiny ``family`` model (module docstring) with its tokenizer and processor files into
    ``folder``; returns ``folder``."""
    tok = vlm_tokenizer(family)
    config = tiny_vlm_config(family, tok)
    for part in (config, config.get_text_config(), config.vision_config):
        part.initializer_range = 0.2
    if family == "gemma3":  # embeddings x sqrt(hidden): a tied random head would repeat the last token
        config.tie_word_embeddings = config.get_text_config().tie_word_embeddings = False
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    with torch.no_grad():
        rows = model.get_output_embeddings().weight  # (V, hidden), the embedding's too (tied)
        direction = torch.randn(rows.shape[1], generator=torch.Generator().manual_seed(seed), dtype=rows.dtype)
        rows[tok.eos_token_id] = direction / direction.norm() * rows.norm(dim=1).mean() * 2
        projector = getattr(model.model, "multi_modal_projector", None)
        if projector is not None and hasattr(projector, "mm_input_projection_weight"):  # Gemma 3: zeros at init
            projector.mm_input_projection_weight.normal_(0.0, 0.2, generator=torch.Generator().manual_seed(seed))
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    write_processor_files(family, tok, folder)
    return folder
