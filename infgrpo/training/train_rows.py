"""How many training rows the data settings give, counted before the model loads (nothing tokenized).

    training_rows(config["data"])    # 12 for a 12-line train.jsonl; None for a hub dataset (not read twice)

The data module takes every row of the training split (``tiny``, a folder of split files, one data file, or
``train_size`` generated prompts of ``reasoning_gym:<task>``), holds ``eval_fraction`` of them out, then keeps the
first ``train_size``; this counts the same way: a ``.jsonl`` file by its non-blank lines, a ``.parquet`` file by
its metadata, ``.json`` / ``.csv`` through ``datasets`` (whose converted copy the data module then reuses). Prompts
that ``long_prompts: skip`` drops are not counted here (they need the tokenizer: :mod:`infgrpo.training.data_check`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infgrpo.assets import TINY_DATA_DIR
from infgrpo.data.in_memory import held_out_count
from infgrpo.data.local_files import FILE_TYPES, split_file
from infgrpo.data.reasoning_tasks import is_reasoning_gym
from infgrpo.settings import ConfigError

GENERATED = 1000
"""Training prompts of a ``reasoning_gym:<task>`` source when ``data.train_size`` is null (the data module's)."""


def training_file(path: str, split: str) -> Path | None:
    """The local file holding the training rows of ``data.path`` (``tiny``, a folder, a file), or None (a hub
    dataset, a reasoning-gym task, or a folder without the split: the data settings' check names that)."""
    source = TINY_DATA_DIR if path == "tiny" else Path(path).expanduser()
    if is_reasoning_gym(path) or not (source.is_dir() or source.is_file()):
        return None
    try:
        return source if source.is_file() else split_file(source, split, path)
    except ConfigError:
        return None


def file_rows(file: Path) -> int | None:
    """Rows of a data file (see the module), or None when it cannot be read (the data module then says why)."""
    if file.suffix == ".jsonl":
        with file.open(encoding="utf-8") as f:
            return sum(1 for line in f if line.strip())
    try:
        if file.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(file).metadata.num_rows
        import datasets

        return datasets.load_dataset(FILE_TYPES[file.suffix], data_files=str(file), split="train").num_rows
    except Exception:  # noqa: BLE001 - an unreadable file is the data module's error, with its reason
        return None


def source_rows(data: Mapping[str, Any]) -> int | None:
    """Rows of the training source before ``eval_fraction`` and ``train_size``; None where unknown before loading."""
    if data.get("train_dataset") is not None:
        return None
    path = data.get("path", "tiny")
    if is_reasoning_gym(path):
        return data.get("train_size") or GENERATED
    file = training_file(path, data.get("train_split", "train"))
    return file_rows(file) if file is not None else None


def training_rows(data: Mapping[str, Any]) -> int | None:
    """Training rows the data module will hold (before ``long_prompts: skip``), or at most hold: a hub dataset is
    read only when the data module sets up, so its count is ``train_size`` (None when that is null too)."""
    rows = source_rows(data)
    cap = data.get("train_size")
    if rows is None:
        return cap
    if not is_reasoning_gym(data.get("path", "tiny")):
        rows -= held_out_count(rows, data.get("eval_fraction") or 0.0)
    return min(rows, cap) if cap is not None else rows
