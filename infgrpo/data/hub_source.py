"""``data.path`` that is no local file or folder: a hub dataset name, checked before anything loads.

    check_hub_source("openai/gsm8k")     # ConfigError: not a name, or offline (HF_HUB_OFFLINE=1) with no cached copy

Without this a missing folder fails inside ``datasets`` with "Couldn't find any data file", and a hub name
with the hub offline with a ``ConnectionError``, both after the model loaded and neither naming ``data.path``.
With the hub reachable a name is left to ``datasets`` (asking the hub here would cost a request per run).
"""

from __future__ import annotations

import os
from pathlib import Path

from infgrpo.data.local_files import FILE_TYPES
from infgrpo.runtime.hub import hub_offline, is_hub_id
from infgrpo.settings import ConfigError

VALID = (
    "valid: 'tiny', a folder of split files (train.jsonl, eval.jsonl, ...; or .json, .csv, .parquet), "
    "reasoning_gym:<task>, or a hub dataset ('name' or 'org/name')"
)


def datasets_offline() -> bool:
    """Whether ``datasets`` will not reach the hub: ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` set."""
    flag = os.environ.get("HF_DATASETS_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
    return flag or hub_offline()


def cache_folders(name: str) -> list[Path]:
    """Where a hub dataset ``name`` would be cached: ``datasets``' prepared copy and the hub's download."""
    from huggingface_hub import constants

    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")).expanduser()
    prepared = Path(os.environ.get("HF_DATASETS_CACHE", home / "datasets")).expanduser()
    return [prepared / name.replace("/", "___"), Path(constants.HF_HUB_CACHE) / f"datasets--{name.replace('/', '--')}"]


def check_hub_source(path: str) -> None:
    """Raises a ConfigError naming ``data.path`` when ``path`` (no local file or folder) cannot be a hub dataset
    name, or the hub is offline and no copy of it is cached."""
    local = Path(path).expanduser()
    if not is_hub_id(path, tuple(FILE_TYPES)):
        raise ConfigError(
            f"data.path={path!r} is neither a local file/folder (looked at {local.resolve()}) nor a hub dataset "
            f"name; {VALID}"
        )
    if datasets_offline() and not any(folder.is_dir() for folder in cache_folders(path)):
        raise ConfigError(
            f"data.path={path!r} is neither a local file/folder nor a dataset the hub can reach offline "
            f"(HF_HUB_OFFLINE=1): no cached copy in {' or '.join(str(f) for f in cache_folders(path))}; download "
            f"it where the hub is reachable, or give a local folder ({VALID})"
        )
