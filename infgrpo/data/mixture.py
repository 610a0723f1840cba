"""``data.mixture``: several datasets read as one, in TRL 1.16's form (``datasets:``) or a reasoning recipe's
(``dataset_mixture:`` with weights and a seed).

    mixture = DatasetMixture([DatasetSource("json", data_files="a.jsonl"), DatasetSource("data/b", columns=["prompt"])])
    train, held_out = mixture_rows(mixture, seed=0)      # the rows of both, in order; no held-out rows

Each source takes TRL's ``DatasetConfig`` fields, which are ``datasets.load_dataset``'s: ``path`` (a hub id, a
folder, or a builder such as ``json`` with ``data_files``; a local data file is read with its builder), ``name``,
``data_dir``, ``data_files``, ``split``, and ``columns`` (the columns kept). The sources are read as TRL's
``get_dataset`` reads them, then:

- **TRL's form** (``seed`` null): concatenated in order, as ``datasets.concatenate_datasets`` (a column one source
  lacks is None in its rows); ``fraction`` (on every source or none) keeps the first rows of each, TRL's shares of
  the largest mixture that oversamples none; ``test_split_size`` (a share, or rows) holds rows out for evaluation by
  infgrpo's seeded draw (``data.seed``; TRL's split is unseeded), as many as ``datasets`` holds out.
- **The recipe's form** (``seed`` set: open-r1's ``dataset_mixture``): each source with a ``weight`` is shuffled with
  the seed and cut to its first ``int(rows x weight)``, the sources are concatenated and shuffled with the seed, and
  ``test_split_size`` splits them with the seed (``datasets``' ``train_test_split``): the recipe's rows, for its seed.

With ``columns``, a source that lacks one is one line naming the source and the column. Local sources read offline;
hub ids need the hub, or a cached copy (``HF_HUB_OFFLINE=1``). Streaming is refused: infgrpo holds the rows, in its
seeded, resumable order. The rows of a process are read once (the command line's checks and the data module share
them).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infgrpo.data.hub_source import check_hub_source
from infgrpo.data.local_files import FILE_TYPES
from infgrpo.settings import ConfigError, check_types

FIELD = "data.mixture"
BUILDERS = ("json", "csv", "parquet", "text", "arrow")
"""``datasets``' builders for local files (``path: json`` with ``data_files``)."""


@dataclass
class DatasetSource:
    """One dataset of a mixture: TRL's ``DatasetConfig`` fields, and the recipe's ``weight``."""

    path: str
    """A hub dataset id, a local folder or data file, or a builder (``json``, ``csv``, ``parquet``) with
    ``data_files``."""
    name: str | None = None
    """The dataset's configuration (``datasets.load_dataset``'s ``name``; the recipe's ``config``)."""
    data_dir: str | None = None
    """A folder of the dataset to read (``load_dataset``'s ``data_dir``)."""
    data_files: str | list[str] | dict[str, str | list[str]] | None = None
    """The data files to read (``load_dataset``'s ``data_files``), e.g. ``train.jsonl`` with ``path: json``."""
    split: str = "train"
    """The split to read."""
    columns: list[str] | None = None
    """The columns kept (null: all); a column the source lacks is refused."""
    fraction: float | None = None
    """TRL's share of the mixture (set on every source or none): the first rows of each source are kept, shares of
    the largest mixture that needs no source's rows twice."""
    weight: float | None = None
    """The recipe's share of this source (with ``seed``): the source shuffled with the seed, its first
    ``int(rows x weight)`` kept."""

    def __post_init__(self) -> None:
        check_types(self)
        for name in ("fraction", "weight"):
            value = getattr(self, name)
            if value is not None and not (0 <= value and (name == "fraction" or value <= 1)):
                valid = ">= 0" if name == "fraction" else "in [0, 1]"
                raise ConfigError(f"{name}={value!r} must be {valid} (null: the whole source)")

    def describe(self) -> str:
        """The source in words: its path, with its files or configuration."""
        extra = [f"{k}={getattr(self, k)!r}" for k in ("name", "data_files", "data_dir") if getattr(self, k)]
        return f"{self.path!r}" + (f" ({', '.join(extra)})" if extra else "")


@dataclass
class DatasetMixture:
    """Several datasets read as one (see :mod:`infgrpo.data.mixture`): TRL's ``DatasetMixtureConfig`` fields, and the
    recipe's ``seed``."""

    datasets: list[DatasetSource] = field(default_factory=list)
    """The sources, in order (each as TRL's ``DatasetConfig``: ``path``, ``name``, ``data_dir``, ``data_files``,
    ``split``, ``columns``, ``fraction``; and the recipe's ``weight``)."""
    streaming: bool = False
    """TRL's streaming; refused: infgrpo holds the rows, in its seeded, resumable order."""
    test_split_size: float | int | None = None
    """Rows held out for evaluation: a share in (0, 1) or a number of rows, split off the mixture (TRL's form:
    infgrpo's draw seeded by ``data.seed``; the recipe's: ``datasets``' ``train_test_split`` with ``seed``)."""
    seed: int | None = None
    """The recipe's ``dataset_mixture`` seed: each weighted source and the mixture are shuffled with it (null: TRL's
    form, the sources concatenated in order)."""

    def __post_init__(self) -> None:
        self.datasets = [_source(s, i) for i, s in enumerate(self.datasets)]
        check_types(self)
        if not self.datasets:
            raise ConfigError("datasets=[] needs at least one source, e.g. [{path: json, data_files: train.jsonl}]")
        if self.streaming:
            raise ConfigError(
                "streaming=True is not read: infgrpo holds a mixture's rows in memory (its seeded order resumes "
                "exactly); set streaming: false (data.train_size caps the rows)"
            )
        fractions = [s.fraction is not None for s in self.datasets]
        if any(fractions) and not all(fractions):
            i = fractions.index(not fractions[0]) if fractions[0] else fractions.index(True)
            raise ConfigError(
                f"datasets[{i}].fraction: set fraction on every source or on none (TRL's rule); "
                f"{sum(fractions)} of {len(fractions)} have one"
            )
        if any(fractions) and sum(s.fraction for s in self.datasets) <= 0:
            raise ConfigError("datasets[*].fraction are all 0: at least one source needs a share above 0")
        weighted = next((i for i, s in enumerate(self.datasets) if s.weight is not None), None)
        if weighted is not None and self.seed is None:
            raise ConfigError(
                f"datasets[{weighted}].weight is the recipe's share (its source shuffled with the mixture's seed): "
                "set seed (the recipe's default is 0), or use fraction (TRL's: the first rows)"
            )
        if any(fractions) and self.seed is not None:
            raise ConfigError(
                "datasets[*].fraction (TRL's form: first rows) and seed (the recipe's form: weights, shuffled) both "
                "set; give weight with seed, or fraction without it"
            )
        size = self.test_split_size
        if size is not None and not (isinstance(size, int) and size >= 1 or isinstance(size, float) and 0 < size < 1):
            raise ConfigError(
                f"test_split_size={size!r} must be a share of the rows in (0, 1) or a number of rows >= 1"
            )


def _source(value: Any, index: int) -> DatasetSource:
    """A :class:`DatasetSource` from a mapping (the recipe's ``id`` and ``config`` read as ``path`` and ``name``) or
    an instance; a ConfigError naming ``datasets[index]`` otherwise."""
    if isinstance(value, DatasetSource):
        return value
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    if not isinstance(value, dict):
        raise ConfigError(f"datasets[{index}]={value!r} must be a mapping of a source's fields (path, split, ...)")
    names = [f.name for f in dataclasses.fields(DatasetSource)]
    unknown = [k for k in value if k not in names]
    if unknown:
        raise ConfigError(f"datasets[{index}].{unknown[0]} is not a field of a source; valid: {', '.join(names)}")
    if "path" not in value:
        raise ConfigError(f"datasets[{index}] has no path (a hub id, a folder or file, or json with data_files)")
    try:
        return DatasetSource(**value)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"datasets[{index}].{err}") from err


def as_mixture(value: Any) -> DatasetMixture | None:
    """``data.mixture`` as a :class:`DatasetMixture` (from a mapping, a parsed namespace or an instance), or None;
    errors name ``data.mixture.<field>``."""
    if value is None or isinstance(value, DatasetMixture):
        return value
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    if not isinstance(value, dict):
        raise ConfigError(f"{FIELD}={value!r} must be a mapping: {{datasets: [...], test_split_size, seed}}")
    unknown = [k for k in value if k not in [f.name for f in dataclasses.fields(DatasetMixture)]]
    if unknown:
        raise ConfigError(f"{FIELD}.{unknown[0]} is not a setting; valid: datasets, streaming, test_split_size, seed")
    try:
        return DatasetMixture(**value)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{FIELD}.{err}") from err


def check_sources(mixture: DatasetMixture) -> None:
    """A ConfigError naming the source for a local file or folder that does not exist, or a hub id that cannot be
    read (offline with no cached copy); nothing is read."""
    for i, source in enumerate(mixture.datasets):
        where = f"{FIELD}.datasets[{i}]"
        files = source.data_files
        listed = [files] if isinstance(files, str) else list(files.values()) if isinstance(files, dict) else files
        for file in (f for group in listed or [] for f in ([group] if isinstance(group, str) else group)):
            if not any(c in file for c in "*?[") and not _local(source, file).exists():
                raise ConfigError(f"{where}.data_files: {file!r} does not exist (looked at {_local(source, file)})")
        if source.path in BUILDERS:
            if not files and not source.data_dir:
                raise ConfigError(f"{where}: path={source.path!r} is a builder: give data_files (or data_dir)")
            continue
        if not Path(source.path).expanduser().exists():
            try:
                check_hub_source(source.path)
            except ConfigError as err:
                raise ConfigError(f"{where}.path: {str(err).removeprefix('data.path=')}") from err


def check_mixture_settings(mixture: DatasetMixture, hp: Mapping[str, Any]) -> None:
    """``data.mixture`` names the data alone: a ConfigError for another source or a second held-out share beside it
    in the data settings ``hp``, or a source that cannot be found (:func:`check_sources`)."""
    other = next(
        (k for k in ("train_dataset", "task_config") if hp.get(k) is not None),
        "path" if hp.get("path", "tiny") != "tiny" else None,
    )
    if other is not None:
        raise ConfigError(
            f"data.mixture and data.{other} both name the training data; set one (a mixture leaves data.path at its "
            "default, tiny)"
        )
    if mixture.test_split_size is not None and (hp.get("eval_fraction") or hp.get("eval_path") is not None):
        raise ConfigError(
            f"data.mixture.test_split_size={mixture.test_split_size} and data.eval_fraction (or eval_path) both give "
            "held-out rows; set one"
        )
    check_sources(mixture)


def _local(source: DatasetSource, file: str) -> Path:
    """Where a data file of ``source`` is: relative to its folder when ``path`` is one, else to the working folder."""
    folder = Path(source.path).expanduser()
    return folder / file if folder.is_dir() else Path(file).expanduser()


def load_source(source: DatasetSource, index: int) -> Any:
    """The ``datasets.Dataset`` of one source, its ``columns`` kept; a ConfigError naming it when it cannot be read
    or lacks a named column."""
    import datasets

    path, files = source.path, source.data_files
    local = Path(path).expanduser()
    if local.is_file():  # a data file: read with its builder, as a folder's files are
        path, files = FILE_TYPES.get(local.suffix, "json"), str(local)
    try:
        dataset = datasets.load_dataset(
            path, name=source.name, data_dir=source.data_dir, data_files=files, split=source.split
        )
    except Exception as err:  # noqa: BLE001 - datasets raises many kinds; the source is what to fix
        raise ConfigError(
            f"{FIELD}.datasets[{index}] ({source.describe()}, split {source.split!r}) could not be read: "
            f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
        ) from err
    if source.columns is not None:
        missing = [c for c in source.columns if c not in dataset.column_names]
        if missing:
            raise ConfigError(
                f"{FIELD}.datasets[{index}] ({source.describe()}) has no column {missing[0]!r} of its columns "
                f"{source.columns}; its columns: {', '.join(dataset.column_names)}"
            )
        dataset = dataset.select_columns(source.columns)
    return dataset


def trl_fractions(sizes: list[int], fractions: list[float]) -> list[int]:
    """Rows TRL keeps of each source for ``fraction`` shares: ``round(share x total)``, the shares normalized, the
    total the largest for which no source gives more rows than it has."""
    shares = [f / sum(fractions) for f in fractions]
    total = min(n / share for n, share in zip(sizes, shares, strict=True) if share > 0)
    return [round(share * total) for share in shares]


def split_count(rows: int, size: float | int) -> int:
    """Rows ``test_split_size`` holds out of ``rows``, as ``datasets``' ``train_test_split`` counts them."""
    return math.ceil(size * rows) if isinstance(size, float) else size


_READ: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}


def mixture_rows(mixture: DatasetMixture, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training rows, held-out rows) of ``mixture`` (see the module docstring); ``seed`` draws TRL's form's held-out
    rows. Read once per process for the same mixture and seed."""
    key = json.dumps([dataclasses.asdict(mixture), seed], sort_keys=True, default=str)
    if key not in _READ:
        _READ[key] = _read(mixture, seed)
    train, held_out = _READ[key]
    return list(train), list(held_out)


def is_local(mixture: DatasetMixture) -> bool:
    """Whether every source of ``mixture`` is read from local files (no hub id: nothing to download)."""
    return all(s.path in BUILDERS or Path(s.path).expanduser().exists() for s in mixture.datasets)


def local_rows(hp: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """(training rows, held-out rows) of the data settings ``hp``'s mixture when every source is local (what the
    command line's checks read before the model loads, and the data module then reuses); None otherwise."""
    from infgrpo.runtime.seeds import run_seed

    mixture = as_mixture(hp.get("mixture"))
    if mixture is None or not is_local(mixture):
        return None
    return mixture_rows(mixture, run_seed(hp.get("seed")))


def _read(mixture: DatasetMixture, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    import datasets

    check_sources(mixture)
    parts = [load_source(s, i) for i, s in enumerate(mixture.datasets)]
    size = mixture.test_split_size
    if mixture.seed is not None:  # the recipe's form: shuffled with its seed, weighted, shuffled, split with it
        parts = [
            p.shuffle(seed=mixture.seed).select(range(int(len(p) * s.weight))) if s.weight is not None else p
            for p, s in zip(parts, mixture.datasets, strict=True)
        ]
        combined = datasets.concatenate_datasets(parts).shuffle(seed=mixture.seed)
        if size is None:
            return _check_rows(combined.to_list()), []
        _check_split(len(combined), size)
        split = combined.train_test_split(test_size=size, seed=mixture.seed)
        return _check_rows(split["train"].to_list()), split["test"].to_list()
    if mixture.datasets[0].fraction is not None:  # TRL's form: the first rows of each
        keep = trl_fractions([len(p) for p in parts], [s.fraction for s in mixture.datasets])
        parts = [p.select(range(n)) for p, n in zip(parts, keep, strict=True)]
    rows = datasets.concatenate_datasets(parts).to_list()
    if size is None:
        return _check_rows(rows), []
    _check_split(len(rows), size)
    held = set(random.Random(seed).sample(range(len(rows)), split_count(len(rows), size)))
    return _check_rows([r for i, r in enumerate(rows) if i not in held]), [r for i, r in enumerate(rows) if i in held]


def _check_split(rows: int, size: float | int) -> None:
    if split_count(rows, size) >= rows:
        raise ConfigError(
            f"{FIELD}.test_split_size={size} holds out {split_count(rows, size)} of the mixture's {rows} rows; no "
            "training row is left"
        )


def _check_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not rows:
        raise ConfigError(f"{FIELD}: the mixture has no training rows (weights or fractions of 0?)")
    return rows
