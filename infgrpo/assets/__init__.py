"""Files shipped inside the package: the tiny default model and its synthetic task data.

``TINY_MODEL_DIR`` is a Hugging Face model directory (Qwen3 architecture, character tokenizer with a
chat template); ``TINY_DATA_DIR`` holds ``train.jsonl`` and ``eval.jsonl``. Both are produced by
``python -m infgrpo.assets.build``. The name ``"tiny"`` stands for them wherever a model or dataset
path is accepted.
"""

from __future__ import annotations

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent
TINY_MODEL_DIR = ASSETS_DIR / "tiny-qwen3"
TINY_DATA_DIR = ASSETS_DIR / "tiny-data"


def resolve_model_path(name: str) -> str:
    """Maps the alias ``"tiny"`` to the shipped model directory; other names pass through."""
    return str(TINY_MODEL_DIR) if name == "tiny" else name
