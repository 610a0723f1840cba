"""A vision-language model's processor, on any machine: the stock one, or the stock class without its video part.

    processor = load_processor("tiny-vl")                               # the shipped tiny Qwen2.5-VL's
    processor = load_processor("Qwen/Qwen2.5-VL-3B-Instruct", {"max_pixels": 401408})
    load_processor("tiny")                                              # None: a text-only model

Why two ways. transformers 5.x's Qwen2-VL, Qwen2.5-VL, Qwen3-VL and SmolVLM processors take a video processor, and
``ProcessorMixin`` checks each part's class, so ``AutoProcessor`` fails without one ("Can't load video processor");
every video processor needs torchvision. The torchvision wheels the package index has for torch 2.13.0 (0.28.0, and
0.29.x) are CUDA builds: next to the CPU torch their import fails (``operator torchvision::nms does not exist``), and
transformers then cannot even import the fast image processors. So where torchvision imports, the stock
``AutoProcessor`` is loaded (its fast image processor, video support); where it does not, the stock processor class
is built with the same files minus its video part (:func:`images_only`): the stock ``__init__``, ``__call__`` and
``apply_chat_template`` run unchanged over transformers' own PIL image processor, and ``save_pretrained`` writes the
stock files. Nothing is patched in transformers or installed: the ``vision`` extra is Pillow alone. Idefics3 needs no
video processor and loads as it is.

The processor pads on the left (``padding_side="left"``): a processor padding on the right corrupts TRL 1.16's VLM
scoring (trl#5785), and the engine's prefill pads prompts on the left too.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import transformers
from transformers import AutoConfig, AutoProcessor
from transformers.processing_utils import ProcessorMixin

from infgrpo.assets import resolve_model_path
from infgrpo.settings import ConfigError
from infgrpo.vision.families import family_of, is_vision_config


@functools.cache
def torchvision_usable() -> bool:
    """Whether ``import torchvision`` works here (False when it is absent, or a build that does not fit this torch)."""
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - a CUDA build next to the CPU torch raises RuntimeError, not ImportError
        return False
    return True


@functools.cache
def images_only(stock: type[ProcessorMixin]) -> type[ProcessorMixin]:
    """``stock`` (a processor class) without its ``video_processor`` part, under the stock name (see the module
    docstring). Its ``__init__`` passes ``video_processor=None`` positionally, which ``ProcessorMixin`` pairs with the
    parts it lists and so drops; calling it with videos fails in transformers (no ``video_processor``)."""

    class ImagesOnly(stock):  # type: ignore[valid-type, misc]
        @classmethod
        def get_attributes(cls) -> list[str]:
            return [name for name in super().get_attributes() if name != "video_processor"]

    ImagesOnly.__name__ = ImagesOnly.__qualname__ = stock.__name__
    ImagesOnly.__module__ = __name__
    ImagesOnly.__doc__ = f"{stock.__name__} for images only (no video processor): see infgrpo.vision.processor."
    return ImagesOnly


def processor_class(folder: str) -> type[ProcessorMixin] | None:
    """The stock processor class a local model folder names (``processor_config.json``'s ``processor_class``,
    else ``preprocessor_config.json``'s), or None where no file names one."""
    for name in ("processor_config.json", "preprocessor_config.json"):
        file = Path(folder) / name
        if file.is_file():
            cls = json.loads(file.read_text()).get("processor_class")
            if cls and hasattr(transformers, cls):
                return getattr(transformers, cls)
    return None


def load_processor(name: str, processor_kwargs: dict[str, Any] | None = None) -> ProcessorMixin | None:
    """The processor of the model ``name`` (an alias of :data:`infgrpo.assets.MODEL_ALIASES`, a folder or a hub id)
    with ``processor_kwargs`` (``AutoProcessor.from_pretrained``'s, e.g. ``min_pixels``/``max_pixels``), padding on
    the left, its :class:`~infgrpo.vision.families.Family` as ``processor.family``; None when the model is text-only
    (its config has no ``vision_config``).

    A ConfigError naming ``data.processor_kwargs`` when a key is none of the image processor's settings.
    """
    folder = resolve_model_path(name)
    config = AutoConfig.from_pretrained(folder)
    if not is_vision_config(config):
        return None
    family = family_of(config)  # a ValueError naming the supported families for another one
    kwargs = dict(processor_kwargs or {})
    stock = processor_class(folder) if Path(folder).is_dir() else None
    if torchvision_usable() or stock is None or "video_processor" not in stock.get_attributes():
        processor = AutoProcessor.from_pretrained(folder, **kwargs)
    else:
        processor = images_only(stock).from_pretrained(folder, backend="pil", **kwargs)
    check_processor_kwargs(processor, kwargs)
    processor.family = family  # what the data module and the vision inputs read
    processor.tokenizer.padding_side = "left"
    if processor.tokenizer.pad_token_id is None:
        processor.tokenizer.pad_token = processor.tokenizer.eos_token
    return processor


def check_processor_kwargs(processor: ProcessorMixin, kwargs: dict[str, Any]) -> None:
    """A ConfigError naming ``data.processor_kwargs`` for a key that is none of the image processor's settings
    (``from_pretrained`` would take it silently and change nothing)."""
    image = processor.image_processor
    known = set(getattr(image, "_valid_kwargs_names", ())) | {k for k in vars(image) if not k.startswith("_")}
    unknown = [key for key in kwargs if key not in known]
    if unknown:
        raise ConfigError(
            f"data.processor_kwargs has {unknown[0]!r}, which {type(image).__name__} does not take; its settings: "
            f"{', '.join(sorted(known))}"
        )
