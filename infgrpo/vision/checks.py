"""What a vision-language run cannot do, each refused in one line (the rules; the preflight and the data call them).

    check_decoder(model_config, "hf_full")   # ConfigError: the baseline decoders take token ids only

The data side's refusals (images with a text-only model, string prompts with images, a template that cannot place an
image, image tokens past the prompt limit, bad image values and missing files) live with the data
(:mod:`infgrpo.data.vision_prompts`, :mod:`infgrpo.data.images`), where the rows are read.
"""

from __future__ import annotations

from typing import Any

from infgrpo.settings import ConfigError
from infgrpo.vision.families import is_vision_config


def check_decoder(config: Any, decoder: str) -> None:
    """A ConfigError naming ``model.sampler.decoder`` when a vision-language model would decode with a baseline
    decoder (``micro_groups``, ``hf_micro``, ``hf_full``, ``hf_cb``): they take token ids only, so the images would
    never reach the model."""
    if decoder != "engine" and is_vision_config(config):
        raise ConfigError(
            f"model.sampler.decoder={decoder!r} decodes token ids only, and {config.model_type!r} is a vision-language "
            "model whose prompts carry images; use model.sampler.decoder: engine"
        )
