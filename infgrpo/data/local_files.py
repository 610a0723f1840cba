"""Local data files (``data.path``: one data file, or a folder of ``<split>.jsonl`` / ``.json`` / ``.csv`` /
``.parquet``), checked.

    check_local_source("data/", ["train", "eval"])    # ConfigError naming the file (and the line) that is wrong
    check_local_source("train.jsonl", [])             # one file: its rows are the training rows
    rows = read_split(Path("data/"), "train")          # the split's rows, each a dict

A file of another type, a missing split, an empty file and a line of a ``.jsonl`` file that is not a JSON object
are all reported with the file, the 1-based line and what ``data.path`` expects, before the model loads (the data
module checks when it is built) instead of from deep inside ``datasets``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infgrpo.settings import ConfigError

FILE_TYPES = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
EXPECTS = (
    "one data file (.jsonl, .json, .csv, .parquet) or a folder holding one file per split (train.jsonl, "
    "eval.jsonl, ...)"
)


def split_file(folder: Path, split: str, path: str) -> Path:
    """The file of ``split`` in ``folder`` (the first of :data:`FILE_TYPES` present); a ConfigError otherwise."""
    for ext in FILE_TYPES:
        if (folder / f"{split}{ext}").is_file():
            return folder / f"{split}{ext}"
    there = sorted(p.name for p in folder.iterdir() if p.suffix in FILE_TYPES)
    raise ConfigError(
        f"data.path={path!r} has no file for split {split!r}; expected one of "
        f"{', '.join(split + e for e in FILE_TYPES)} (data files there: {', '.join(there) or 'none'})"
    )


def check_local_source(path: str, splits: list[str], field: str = "data.path") -> None:
    """Raises a ConfigError when ``field`` names a local file of another type than :data:`FILE_TYPES`, or an empty
    one, or a folder whose split files are missing, empty or (``.jsonl``) not one JSON object a line. Paths that do
    not exist locally are left alone (a hub dataset name)."""
    source = Path(path).expanduser()
    if source.is_file():
        if source.suffix not in FILE_TYPES:
            raise ConfigError(f"{field}={path!r} is a {source.suffix or 'suffix-less'} file; {field} expects {EXPECTS}")
        check_file(source, field, "its rows")
        return
    if not source.is_dir():
        return
    for split in splits:
        check_file(split_file(source, split, path), field, f"split {split!r}")


def check_file(file: Path, field: str, what: str) -> None:
    """A ConfigError unless ``file`` has rows (and, ``.jsonl``, a JSON object on every line)."""
    if file.stat().st_size == 0:
        raise ConfigError(f"{field}: {file} is empty; {what} need at least one row")
    if file.suffix == ".jsonl":
        jsonl_rows(file)


def read_file(file: Path, field: str = "data.path", limit: int | None = None) -> list[dict[str, Any]]:
    """The rows of one data file, read by ``datasets`` (one schema for all rows), checked as :func:`read_split`;
    the first ``limit`` of them (None: all)."""
    check_local_source(str(file), [], field)
    return _read(file, limit=limit)


def jsonl_rows(file: Path) -> list[dict[str, Any]]:
    """The rows of a ``.jsonl`` file (blank lines skipped); a ConfigError naming the 1-based line of a bad one."""
    rows = []
    with file.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ConfigError(f"{file} line {number} is not valid JSON ({err.msg}): {line.strip()[:80]!r}") from err
            if not isinstance(row, dict):
                raise ConfigError(f"{file} line {number} is a JSON {type(row).__name__}, not an object of columns")
            rows.append(row)
    if not rows:
        raise ConfigError(f"{file} has no rows (only blank lines)")
    return rows


def read_split(folder: Path, split: str, path: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The rows of ``split`` in ``folder``, read by ``datasets`` (one schema for all rows); a ``.jsonl`` file is
    checked line by line first, so an error names the line. The first ``limit`` rows (None: all)."""
    file = split_file(folder, split, path)
    if file.suffix == ".jsonl":
        jsonl_rows(file)
    return _read(file, f"split {split!r}", limit)


def _read(file: Path, what: str = "the file", limit: int | None = None) -> list[dict[str, Any]]:
    import datasets

    try:
        ds = datasets.load_dataset(FILE_TYPES[file.suffix], data_files=str(file), split="train")
    except Exception as err:  # noqa: BLE001 - datasets raises many kinds; the file is what the user must fix
        raise ConfigError(f"{file} could not be read as {file.suffix[1:]} ({type(err).__name__}: {err})") from err
    if not len(ds):
        raise ConfigError(f"{file} has no rows; {what} needs at least one")
    return head_rows(ds, limit)


def head_rows(ds: Any, limit: int | None) -> list[dict[str, Any]]:
    """The first ``limit`` rows of the ``datasets.Dataset`` ``ds`` (None: all), as dicts: cut before the rows are
    read, so only the kept rows' images are decoded."""
    if limit is not None and limit < len(ds):
        ds = ds.select(range(limit))
    return [dict(r) for r in ds]
