"""The Hugging Face hub as a source of names: whether it is offline, and whether a name reads as a repository id.

    hub_offline()                     # HF_HUB_OFFLINE=1 -> True
    is_hub_id("openai/gsm8k")         # True; "./data", "a/b/c", "model.gguf" (with suffixes=(".gguf",)) -> False

The model (:mod:`infgrpo.policy.source`) and the data (:mod:`infgrpo.data.hub_source`) both check a name that is
no local file or folder against these before anything loads.
"""

from __future__ import annotations

import os


def hub_offline() -> bool:
    """Whether huggingface_hub is offline (``HF_HUB_OFFLINE``, read as the library reads it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def is_hub_id(name: str, suffixes: tuple[str, ...] = ()) -> bool:
    """Whether ``name`` can be a hub repository id (``name`` or ``org/name``) rather than a path: it does not start
    with ``.``, ``/`` or ``~``, has at most one ``/``, does not end in one of ``suffixes`` (file types that make it a
    path), and huggingface_hub's ``validate_repo_id`` accepts it."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if name.startswith((".", "/", "~")) or name.count("/") > 1 or name.endswith(suffixes):
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True
