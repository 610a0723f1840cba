"""The policy's config (``config.json``, or a GGUF file's metadata), read before its weights load.

    config = load_model_config("tiny")          # a transformers PretrainedConfig; no weight is read
    config = load_model_config("smollm2")       # a GGUF checkpoint: the file's metadata

The command line checks what depends on the model itself against it (the context of ``model.sampler.
max_new_tokens``, the modules of ``model.lora.target_modules``) before the model loads; it resolves names as
:func:`~infgrpo.policy.load.load_policy` does (:func:`~infgrpo.policy.load.resolve_model`).
"""

from __future__ import annotations

import functools

from transformers import AutoConfig, PretrainedConfig

from infgrpo.policy.load import resolve_model
from infgrpo.settings import ConfigError

FIELD = "model.policy.model_name_or_path"


@functools.lru_cache(maxsize=4)
def load_model_config(name: str, gguf_file: str | None = None) -> PretrainedConfig:
    """``AutoConfig`` of the policy ``name`` (and ``gguf_file``); a ConfigError naming the field when it cannot be
    read (a missing GGUF file or package, a folder without a readable config). Read once per process for each
    name (the checks before loading share it): treat it as read-only."""
    try:
        folder, gguf = resolve_model(name, gguf_file)
        return AutoConfig.from_pretrained(folder, **({"gguf_file": gguf} if gguf else {}))
    except (OSError, ValueError, ImportError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"{FIELD}={name!r}: its config could not be read ({reason})") from err
