"""Files shipped inside the package: the tiny default model and its synthetic task data.

``TINY_MODEL_DIR`` is a Hugging Face model directory (Qwen3 architecture, character tokenizer with a
chat template); ``TINY_DATA_DIR`` holds ``train.jsonl`` and ``eval.jsonl``. Both are produced by
``python -m infgrpo.assets.build``. The name ``"tiny"`` stands for them wherever a model or dataset
path is accepted.

``TINY_TOOLS_MODEL_DIR`` is the same architecture warm-started to call a calculator tool, with a chat template
that renders tools (:mod:`infgrpo.assets.calculator`); ``python -m infgrpo.builds.tools`` builds it and
writes its task's splits as ``calculator-train.jsonl`` and ``calculator-eval.jsonl`` in ``TINY_DATA_DIR``.

``TINY_STOCK_TOOLS_MODEL_DIR`` is that model taught to call the calculator in two stock templates' formats, Qwen3's and
Llama 3.1's, whose prompts are 700 and 1,070 tokens long (``python -m infgrpo.builds.stock_tools``).

``TINY_VL_MODEL_DIR`` (``tiny-vl``) and ``TINY_IDEFICS3_MODEL_DIR`` (``tiny-idefics3``) are tiny vision-language models
(Qwen2.5-VL and Idefics3/SmolVLM architectures, with their processors' files), warm-started on the shapes task
(:mod:`infgrpo.assets.shapes`), whose splits are ``train.parquet`` and ``eval.parquet`` in ``SHAPES_DATA_DIR``
(TRL's format: a conversational ``prompt`` and an ``image`` column); ``tools/build_tiny_vlms.py`` builds them
(:mod:`infgrpo.assets.tiny_vlm` is their recipe).

``TINY_VL_TOOLS_MODEL_DIR`` (``tiny-vl-tools``) is a tiny Qwen3-VL with the stock-format tool model's language model,
taught to call the calculator in Qwen3-VL's stock format with an image in its prompt: the fixture of images with tools
(``python -m infgrpo.builds.vl_tools``).
"""

from __future__ import annotations

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent
TINY_MODEL_DIR = ASSETS_DIR / "tiny-qwen3"
TINY_DATA_DIR = ASSETS_DIR / "tiny-data"
TINY_TOOLS_MODEL_DIR = ASSETS_DIR / "tiny-qwen3-tools"
TINY_VL_MODEL_DIR = ASSETS_DIR / "tiny-qwen2.5-vl"
TINY_IDEFICS3_MODEL_DIR = ASSETS_DIR / "tiny-idefics3"
SHAPES_DATA_DIR = ASSETS_DIR / "tiny-shapes"
TINY_STOCK_TOOLS_MODEL_DIR = ASSETS_DIR / "tiny-qwen3-stock-tools"
TINY_VL_TOOLS_MODEL_DIR = ASSETS_DIR / "tiny-qwen3-vl-tools"


MODEL_ALIASES = {
    "tiny": TINY_MODEL_DIR,
    "tiny-tools": TINY_TOOLS_MODEL_DIR,
    "tiny-stock-tools": TINY_STOCK_TOOLS_MODEL_DIR,
    "tiny-vl": TINY_VL_MODEL_DIR,
    "tiny-idefics3": TINY_IDEFICS3_MODEL_DIR,
    "tiny-vl-tools": TINY_VL_TOOLS_MODEL_DIR,
}
"""The shipped models by name: the tiny default, the tiny model that calls the calculator tool, that model in
Qwen3's and Llama 3.1's tool formats, the tiny vision-language models (Qwen2.5-VL, Idefics3) and the tiny Qwen3-VL
that calls the calculator."""


def resolve_model_path(name: str) -> str:
    """Maps an alias of :data:`MODEL_ALIASES` (``"tiny"``, ``"tiny-tools"``, ``"tiny-stock-tools"``, ``"tiny-vl"``,
    ...) to its shipped folder; other names pass through."""
    return str(MODEL_ALIASES[name]) if name in MODEL_ALIASES else name
