"""Where a model comes from (``policy.model_name_or_path``), checked before anything loads.

    check_model_source("./checkpoints/run1")   # ConfigError: neither an existing folder nor a hub id

A name is the shipped ``tiny``, ``smollm2``, a ``.gguf`` file, an existing folder, or a Hugging Face hub id
(``name`` or ``org/name``); with the hub offline (``HF_HUB_OFFLINE=1``) a hub id must be in the local cache.
Anything else would fail later with a long traceback from inside ``huggingface_hub``.
"""

from __future__ import annotations

from pathlib import Path

from infgrpo.settings import ConfigError

FIELD = "model.policy.model_name_or_path"


def hub_offline() -> bool:
    """Whether huggingface_hub is offline (``HF_HUB_OFFLINE``, read as the library reads it)."""
    import os

    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def check_model_source(name: str, gguf_file: str | None = None, field: str = FIELD) -> None:
    """Raises a ConfigError naming ``field`` when ``name`` is neither a shipped alias, an existing folder or file,
    nor a hub id; or when the hub is offline and the id is not in the local cache."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if name in ("tiny", "smollm2") or Path(name).expanduser().exists():
        return
    looks_like_path = name.startswith((".", "/", "~")) or name.endswith(".gguf") or name.count("/") > 1
    try:
        validate_repo_id(name)
    except HFValidationError:
        looks_like_path = True
    if looks_like_path:
        raise ConfigError(
            f"{field}={name!r} is neither an existing folder (looked at {Path(name).expanduser().resolve()}) nor a "
            "Hugging Face hub id ('name' or 'org/name'); valid: a model folder, a .gguf file, a hub id, 'tiny' or "
            "'smollm2'"
        )
    if hub_offline():
        cached = try_to_load_from_cache(name, gguf_file or "config.json")
        if not isinstance(cached, str):
            raise ConfigError(
                f"{field}={name!r} is no local folder, and the hub is offline (HF_HUB_OFFLINE=1) with no cached "
                f"copy of it; download it where the hub is reachable, or give a local folder"
            )
