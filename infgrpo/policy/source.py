"""Where a model comes from (``policy.model_name_or_path``), checked before anything loads.

    check_model_source("./checkpoints/run1")   # ConfigError: neither an existing folder nor a hub id

A name is the shipped ``tiny``, ``smollm2``, a ``.gguf`` file, an existing folder, or a Hugging Face hub id
(``name`` or ``org/name``); with the hub offline (``HF_HUB_OFFLINE=1``) a hub id must be in the local cache.
Anything else would fail later with a long traceback from inside ``huggingface_hub``.
"""

from __future__ import annotations

from pathlib import Path

from infgrpo.assets import MODEL_ALIASES
from infgrpo.runtime.hub import hub_offline, is_hub_id
from infgrpo.settings import ConfigError

FIELD = "model.policy.model_name_or_path"


def check_model_source(name: str, gguf_file: str | None = None, field: str = FIELD) -> None:
    """Raises a ConfigError naming ``field`` when ``name`` is neither a shipped alias, an existing folder or file,
    nor a hub id; or when the hub is offline and the id is not in the local cache; or when ``gguf_file`` is in
    none of the places loading looks (:func:`check_gguf_file`)."""
    check_gguf_file(name, gguf_file, field.rpartition(".")[0])
    from huggingface_hub import try_to_load_from_cache

    if name in MODEL_ALIASES or name == "smollm2" or Path(name).expanduser().exists():
        return
    if not is_hub_id(name, (".gguf",)):
        raise ConfigError(
            f"{field}={name!r} is neither an existing folder (looked at {Path(name).expanduser().resolve()}) nor a "
            f"Hugging Face hub id ('name' or 'org/name'); valid: a model folder, a .gguf file, a hub id, "
            f"{', '.join(map(repr, MODEL_ALIASES))} or 'smollm2'"
        )
    if hub_offline():
        cached = try_to_load_from_cache(name, gguf_file or "config.json")
        if not isinstance(cached, str):
            raise ConfigError(
                f"{field}={name!r} is no local folder, and the hub is offline (HF_HUB_OFFLINE=1) with no cached "
                f"copy of it; download it where the hub is reachable, or give a local folder"
            )


def check_gguf_file(name: str, gguf_file: str | None, group: str = "model.policy") -> None:
    """Raises a ConfigError naming ``<group>.gguf_file`` (or ``<group>.model_name_or_path``) when the GGUF file
    loading would take cannot be: not in the local model folder nor a path, a second one for a name that is a GGUF
    file already, or no ``gguf`` package; the checks of :func:`~infgrpo.policy.load.resolve_model`, which reads no
    file. A file of a hub repository is left to the download."""
    if gguf_file is None and not (name == "smollm2" or name.endswith(".gguf")):
        return
    from infgrpo.policy.load import resolve_model

    try:
        resolve_model(name, gguf_file)
    except (ValueError, ImportError) as err:  # they start with gguf_file= or model=
        message = str(err)
        if message.startswith("model="):
            message = "model_name_or_path=" + message.removeprefix("model=")
        raise ConfigError(f"{group}.{message}") from err
