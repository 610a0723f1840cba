"""A GGUF checkpoint converted once: later loads read an ordinary Hugging Face folder of it.

    model = cached_load(AutoModelForCausalLM, folder, gguf, convert, dtype=torch.float32)

transformers reads a GGUF file by dequantizing and renaming every tensor (SmolLM2-135M: ~10 s of CPU, and
its tokenizer ~3 s from the file's metadata) on every load. The first load of a local GGUF file goes that
way and then writes what it loaded with ``save_pretrained`` (safetensors) into a folder of the cache; later
loads ``from_pretrained`` that folder (well under a second) and give the same tensors, dtypes, names, tied
weights, config and tokenizer (the tests compare them with the direct load).

The cache lives in ``$INFGRPO_CACHE/gguf`` (default: ``$HF_HOME/infgrpo/gguf``, i.e.
``~/.cache/huggingface/infgrpo/gguf``); ``INFGRPO_CACHE=off`` turns it off. A folder's name holds a hash of
what determines its content: the GGUF file's resolved path, size and modification time, the loading keywords
(the dtype) and the transformers version; a changed file or an upgrade makes a new folder (old ones stay
until deleted by hand). A writer fills a temporary folder next to it and renames it into place when complete,
so a reader never sees half a folder (a killed writer leaves a ``.partial-*`` folder that the next writer
removes after an hour); a folder whose files do not match its manifest, or that fails to load, is removed and
converted again. GGUF files of a hub repository (not local paths) are loaded directly, as before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import transformers

ENV = "INFGRPO_CACHE"
OFF = ("off", "0", "false", "no")
MANIFEST = "infgrpo-gguf-cache.json"
STALE_PARTIAL_S = 3600.0
T = TypeVar("T")
log = logging.getLogger(__name__)


def cache_root() -> Path | None:
    """The folder of converted GGUF checkpoints (``$INFGRPO_CACHE/gguf``, default ``$HF_HOME/infgrpo/gguf``);
    None when ``INFGRPO_CACHE`` is ``off`` (or ``0``, ``false``, ``no``)."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in OFF:
        return None
    if value:
        return Path(value).expanduser() / "gguf"
    from huggingface_hub import constants

    return Path(constants.HF_HOME).expanduser() / "infgrpo" / "gguf"


def cache_folder(gguf: str, kind: str, **kwargs: Any) -> Path | None:
    """Where the conversion of the local GGUF file ``gguf`` into ``kind`` (``model``, ``tokenizer``) with the
    loading keywords ``kwargs`` is kept; None when the cache is off or ``gguf`` is no local file."""
    root, path = cache_root(), Path(gguf)
    if root is None or not path.is_file():
        return None
    stat = path.resolve().stat()
    key = {
        "gguf": str(path.resolve()),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "kind": kind,
        "kwargs": {k: repr(v) for k, v in sorted(kwargs.items())},
        "transformers": transformers.__version__,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return root / f"{path.stem}-{kind}-{digest}"


def manifest_of(folder: Path) -> dict[str, int]:
    """The size in bytes of every file in ``folder`` but the manifest."""
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}


def is_complete(folder: Path) -> bool:
    """Whether ``folder`` holds its manifest and exactly the files it lists, in the sizes it lists."""
    try:
        listed = json.loads((folder / MANIFEST).read_text())["files"]
        return bool(listed) and listed == manifest_of(folder)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def discard(folder: Path) -> None:
    """Removes ``folder``: renamed aside first, so no reader finds it half deleted."""
    aside = folder.with_name(f".partial-{folder.name}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        folder.rename(aside)
    except OSError:
        return  # gone already, or another process moved it
    shutil.rmtree(aside, ignore_errors=True)


def write(obj: Any, folder: Path) -> None:
    """``obj.save_pretrained`` into ``folder``, atomically: a temporary sibling renamed into place when its
    manifest is written. A folder another process completed first wins; a failure (a read-only cache, a full
    disk) only loses the cache, with a logged warning."""
    tmp = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        sweep(folder.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".partial-{folder.name}-", dir=folder.parent))
        obj.save_pretrained(tmp)
        (tmp / MANIFEST).write_text(json.dumps({"files": manifest_of(tmp)}, indent=1))
        os.rename(tmp, folder)  # fails if a complete folder is there already: keep that one
    except OSError as err:
        if not is_complete(folder):
            log.warning("could not write the GGUF conversion cache %s: %s", folder, err)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def sweep(root: Path) -> None:
    """Removes the ``.partial-*`` folders in ``root`` older than an hour: left by killed writers."""
    now = time.time()
    for old in root.glob(".partial-*"):
        try:
            if now - old.stat().st_mtime > STALE_PARTIAL_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass  # removed by another process meanwhile


def cached_load(cls: Any, folder: str, gguf: str, convert: Callable[[], T], kind: str = "model", **kwargs: Any) -> T:
    """``convert()`` (the GGUF load) the first time, ``cls.from_pretrained`` of its cached copy (with ``kwargs``)
    after; either way named after ``folder``, the folder of the GGUF file, as the direct load names it."""
    where = cache_folder(gguf, kind, **kwargs)
    if where is not None and where.is_dir():
        if is_complete(where):
            try:
                return renamed(cls.from_pretrained(str(where), **kwargs), folder)
            except Exception as err:  # whatever broke it (a damaged file, an unreadable header): convert again
                log.warning("the GGUF conversion cache %s could not be loaded (%s); converting again", where, err)
        discard(where)
    loaded = convert()
    if where is not None:
        write(loaded, where)
    return loaded


def renamed(loaded: T, folder: str) -> T:
    """``loaded`` with the name (``name_or_path``) the direct GGUF load gives it: peft writes it into adapters."""
    loaded.name_or_path = folder
    config = getattr(loaded, "config", None)
    if config is not None:
        config._name_or_path = folder
    else:
        loaded.init_kwargs["name_or_path"] = folder
    return loaded
