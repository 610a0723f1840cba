"""``sampler.stop_token_ids`` against the model's vocabulary: an id the model cannot emit never stops anything.

    check_stop_token_ids([999999], vocab_size=151936)     # ConfigError naming sampler.stop_token_ids
    check_stop_tokens_of(PolicyConfig("tiny"), [999999])   # the same from the model's config.json, no weights read

The command line checks before the model loads (:func:`check_stop_tokens_of`, reading only ``AutoConfig``, and
only when stop ids are set); :class:`~infgrpo.MicroGroupSampler` checks against the loaded model's embedding rows
(:func:`model_vocab_size`), for the Python API.
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


def check_stop_tokens_of(policy: Any, stop_token_ids: list[int], field: str = FIELD) -> None:
    """:func:`check_stop_token_ids` against the config of the model of ``policy`` (a
    :class:`~infgrpo.policy.config.PolicyConfig`; ``AutoConfig``: no weights are read), read
    only when ``stop_token_ids`` is not empty; a config that cannot be read is left to the loading to report."""
    if not stop_token_ids:
        return
    from transformers import AutoConfig

    from infgrpo.policy.load import resolve_model

    try:
        folder, gguf = resolve_model(policy.model_name_or_path, policy.gguf_file)
        config = AutoConfig.from_pretrained(folder, **({"gguf_file": gguf} if gguf else {}))
    except (OSError, ValueError, ImportError):
        return
    check_stop_token_ids(stop_token_ids, config_vocab_size(config), field)
