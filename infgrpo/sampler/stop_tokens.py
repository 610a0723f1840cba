"""``sampler.stop_token_ids`` against the model's vocabulary: an id the model cannot emit never stops anything.

    check_stop_token_ids([999999], vocab_size=151936)     # ConfigError naming sampler.stop_token_ids

The command line checks before the model loads, against its config (:mod:`infgrpo.training.preflight.model_data`);
:class:`~infgrpo.MicroGroupSampler` checks against the loaded model's embedding rows (:func:`model_vocab_size`),
for the Python API.
"""

from __future__ import annotations

from typing import Any

from infgrpo.settings import ConfigError

FIELD = "sampler.stop_token_ids"


def check_stop_token_ids(stop_token_ids: list[int], vocab_size: int | None, field: str = FIELD) -> None:
    """Raises a ConfigError naming ``field``, the ids and the vocabulary size when an id is not below
    ``vocab_size`` (token ids run 0 .. vocab_size - 1); nothing is checked when the size is unknown (None)."""
    if vocab_size is None:
        return
    outside = [i for i in stop_token_ids if not 0 <= i < vocab_size]
    if outside:
        verb = "is" if len(outside) == 1 else "are"
        raise ConfigError(
            f"{field}={list(stop_token_ids)}: {', '.join(map(str, outside))} {verb} outside the model's vocabulary "
            f"(vocab_size={vocab_size}: token ids 0 to {vocab_size - 1}); such a token is never sampled, so it "
            "would never stop a completion"
        )


def config_vocab_size(config: Any) -> int | None:
    """The vocabulary size a transformers config gives (its text config's for a multimodal one), or None."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = getattr(text, "vocab_size", None)
    return size if isinstance(size, int) and size > 0 else None


def model_vocab_size(model: Any) -> int | None:
    """The rows of a loaded model's input embedding (what it can emit and read), else its config's size."""
    try:
        return int(model.get_input_embeddings().num_embeddings)
    except (AttributeError, TypeError):
        return config_vocab_size(getattr(model, "config", None))
