"""The stock Qwen2.5-VL processor (with torchvision) against infgrpo's images-only one, on the same files.

    python3 -m venv /tmp/vlm-cu && PIP_CONFIG_FILE=/dev/null /tmp/vlm-cu/bin/pip install torch==2.13.0 \\
        torchvision==0.28.0 transformers==5.25.0 pillow          # the CUDA pair from PyPI; it imports on a CPU too
    PYTHONPATH=. HF_HUB_OFFLINE=1 /tmp/vlm-cu/bin/python tools/vlm_processor_parity.py

Where torchvision imports, ``AutoProcessor`` gives the stock processor with the torchvision image processor; infgrpo
builds the stock class without its video part over transformers' PIL image processor where it does not
(:mod:`infgrpo.vision.processor`). Printed for images that need no resize and images that do: whether the ids,
grids and token types are equal, the largest pixel difference to the stock processor, and whether the pixels equal
the stock *PIL* image processor's. Measured 2026-12-06 (torch 2.13.0 CUDA build on a CPU, torchvision 0.28.0,
transformers 5.25.0): ids, grids and token types equal; pixels 2.4e-7 from the torchvision processor without a
resize, 0.015 with one (the two backends resize differently); equal to the PIL image processor's in every case.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import AutoImageProcessor, AutoProcessor, Qwen2_5_VLProcessor

from infgrpo.assets.tiny_vlm import vlm_tokenizer, write_processor_files
from infgrpo.vision.processor import images_only, torchvision_usable


def main() -> None:
    """Prints the comparison of the module docstring."""
    if not torchvision_usable():
        raise SystemExit("torchvision does not import here: run this in a venv where it does (module docstring)")
    folder = Path(tempfile.mkdtemp())
    write_processor_files("qwen2_5_vl", vlm_tokenizer("qwen2_5_vl"), folder)
    stock = AutoProcessor.from_pretrained(folder)
    ours = images_only(Qwen2_5_VLProcessor).from_pretrained(folder, backend="pil")
    pil = AutoImageProcessor.from_pretrained(folder, backend="pil")
    print(f"stock: {type(stock.image_processor).__name__}; infgrpo's: {type(ours.image_processor).__name__}")
    rng = np.random.default_rng(0)
    for h, w in ((56, 56), (42, 70), (90, 100)):
        image = Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
        messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "?"}]}]
        kwargs = dict(add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt")
        a, b = stock.apply_chat_template(messages, **kwargs), ours.apply_chat_template(messages, **kwargs)
        same = all(torch.equal(a[k], b[k]) for k in ("input_ids", "image_grid_thw", "mm_token_type_ids"))
        diff = (a["pixel_values"] - b["pixel_values"]).abs().max().item()
        pil_same = torch.equal(pil(images=[image], return_tensors="pt")["pixel_values"], b["pixel_values"])
        print(
            f"{h}x{w}: ids/grid/types equal {same}; pixels vs stock {diff:.2g}; equal to its PIL processor {pil_same}"
        )


if __name__ == "__main__":
    main()
