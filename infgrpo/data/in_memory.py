"""Rows of an in-memory ``datasets.Dataset`` (TRL's ``train_dataset=``), and a seeded held-out fraction of rows.

rows = dataset_rows(Dataset.from_list([{"prompt": "2+2?", "answer": "4"}]), "train", "train_dataset")
train, held_out = held_out_split(rows, 0.1, seed=0)      # 10% of the rows held out, the same for a seed
"""

from __future__ import annotations

import random
from typing import Any

from infgrpo.settings import ConfigError


def dataset_rows(dataset: Any, split: str | None, field: str, missing_ok: bool = False) -> list[dict[str, Any]]:
    """The rows of ``dataset``: a ``datasets.Dataset``, a ``DatasetDict`` (its ``split``), or a list of dicts; a
    ConfigError naming ``field`` otherwise. ``missing_ok``: only a ``DatasetDict``'s ``split`` is wanted ([] when
    ``dataset`` is none, or lacks it)."""
    import datasets

    if missing_ok and not isinstance(dataset, datasets.DatasetDict):
        return []
    if isinstance(dataset, datasets.DatasetDict):
        if split not in dataset:
            if missing_ok:
                return []
            raise ConfigError(f"{field} is a DatasetDict without split {split!r}; its splits: {', '.join(dataset)}")
        dataset = dataset[split]
    if isinstance(dataset, datasets.IterableDataset | datasets.IterableDatasetDict):
        raise ConfigError(f"{field} is an iterable (streaming) dataset; give a datasets.Dataset (no streaming)")
    if isinstance(dataset, datasets.Dataset):
        rows = [dict(r) for r in dataset]
    elif isinstance(dataset, list) and all(isinstance(r, dict) for r in dataset):
        rows = list(dataset)
    else:
        raise ConfigError(
            f"{field} is a {type(dataset).__name__}; give a datasets.Dataset, a DatasetDict or a list of dicts "
            "(a file or a hub name goes to data.path)"
        )
    if not rows:
        raise ConfigError(f"{field} has no rows")
    return rows


def held_out_count(rows: int, fraction: float) -> int:
    """Rows ``eval_fraction`` holds out of ``rows``: ``round(fraction * rows)``, at least 1 (none for 0)."""
    return max(1, round(fraction * rows)) if fraction else 0


def held_out_split(rows: list[dict[str, Any]], fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows): :func:`held_out_count` rows drawn with ``seed`` are held out; both keep the
    file's order. A ConfigError when no training row would be left."""
    n = held_out_count(len(rows), fraction)
    if n >= len(rows):
        raise ConfigError(f"data.eval_fraction={fraction} holds out all {len(rows)} rows; no training row is left")
    held = set(random.Random(seed).sample(range(len(rows)), n))
    return [r for i, r in enumerate(rows) if i not in held], [r for i, r in enumerate(rows) if i in held]
