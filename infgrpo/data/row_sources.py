"""Which rows a run trains and evaluates on: (training rows, held-out rows) from the data settings' source.

    train, held_out = split_rows(PromptDataModule(path="tiny", train_size=8, eval_size=4).hparams)
    rows = load_rows("tiny", "train")     # every row of one split of the tiny task, a folder, a file or a hub dataset

The sources, in the order they are tried: ``reasoning_gym:<task>`` (rows generated with ``task_seed``, the held-out
ones with ``eval_task_seed``), ``data.mixture`` (:mod:`infgrpo.data.mixture`), a ``train_dataset`` (TRL's
``train_dataset=``), then ``data.path`` (the tiny task, a folder of split files, one data file or a hub dataset). The
held-out rows are a seeded ``eval_fraction`` of the training rows, else ``eval_dataset``, ``eval_path``, or
``eval_split``. Each list is then cut to its first ``train_size`` and ``eval_size`` rows. Placeholder rows
(``data.path: null``) are :mod:`infgrpo.data.placeholder_rows`'.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infgrpo.assets import TINY_DATA_DIR
from infgrpo.data.in_memory import dataset_rows, held_out_split
from infgrpo.data.local_files import check_local_source, head_rows, read_file, read_split
from infgrpo.data.mixture import as_mixture, mixture_rows
from infgrpo.data.reasoning_tasks import is_reasoning_gym, task_rows
from infgrpo.runtime.seeds import derive_seed

Rows = list[dict[str, Any]]


def load_rows(path: str, split: str, config_name: str | None = None, limit: int | None = None) -> Rows:
    """Rows of ``split`` from the tiny task, a local folder of split files, one data file (``split`` unused), or a
    hub dataset: the first ``limit`` of them (None: all), cut before they are read (only their images decoded)."""
    folder = TINY_DATA_DIR if path == "tiny" else Path(path).expanduser()
    if folder.is_dir():
        return read_split(folder, split, path, limit)
    if folder.is_file():
        return read_file(folder, "data.path", limit)
    check_local_source(path, [split])
    import datasets

    return head_rows(datasets.load_dataset(path, config_name, split=split), limit)


def split_rows(hp: Mapping[str, Any], train_dataset: Any = None, eval_dataset: Any = None) -> tuple[Rows, Rows]:
    """(training rows, held-out rows) of the data settings ``hp`` (a data module's hyperparameters), the in-memory
    ``train_dataset`` and ``eval_dataset`` given: ``train_size`` and ``eval_size`` of them, read or generated."""
    if is_reasoning_gym(hp["path"]):
        eval_seed = hp["eval_task_seed"]
        eval_seed = eval_seed if eval_seed is not None else derive_seed(hp["task_seed"], 1) % 2**31
        eval_size = hp["eval_size"] if hp["eval_split"] else 0
        train_size = hp["train_size"] if hp["train_size"] is not None else 1000
        return task_rows(hp["path"], hp["task_config"], train_size, eval_size, hp["task_seed"], eval_seed)
    mixture = as_mixture(hp.get("mixture"))
    if mixture is not None:
        train, held_out = mixture_rows(mixture, hp["seed"])
        if mixture.test_split_size is None and hp.get("eval_fraction"):
            train, held_out = held_out_split(train, hp["eval_fraction"], hp["seed"])
        elif mixture.test_split_size is None and hp.get("eval_path"):
            held_out = read_file(Path(hp["eval_path"]).expanduser(), "data.eval_path")
        return train[: hp["train_size"]], held_out[: hp["eval_size"]]
    if train_dataset is not None:
        train = dataset_rows(train_dataset, hp["train_split"], "train_dataset")
    else:
        kept = None if hp.get("eval_fraction") else hp["train_size"]  # a held-out share is drawn from every row
        train = load_rows(hp["path"], hp["train_split"], hp["config_name"], kept)
    fraction = hp.get("eval_fraction", 0.0)
    if fraction:
        train, held_out = held_out_split(train, fraction, hp["seed"])
    elif eval_dataset is not None or hp.get("eval_path"):
        held_out = given_held_out(hp, eval_dataset)
    elif train_dataset is not None and hp["eval_split"]:  # a DatasetDict's held-out split, if it has one
        held_out = dataset_rows(train_dataset, hp["eval_split"], "train_dataset", missing_ok=True)
    elif train_dataset is not None:
        held_out = []
    elif hp["eval_split"] and not Path(hp["path"]).expanduser().is_file():
        held_out = load_rows(hp["path"], hp["eval_split"], hp["config_name"], hp["eval_size"])
    else:  # one data file and no held-out rows named: no evaluation
        held_out = []
    return train[: hp["train_size"]], held_out[: hp["eval_size"]]


def given_held_out(hp: Mapping[str, Any], eval_dataset: Any = None) -> Rows | None:
    """The held-out rows given as such: ``eval_dataset`` (its ``eval_split`` of a ``DatasetDict``), else the file
    ``eval_path``; None when neither is."""
    if eval_dataset is not None:
        return dataset_rows(eval_dataset, hp["eval_split"], "eval_dataset")
    if hp.get("eval_path"):
        return read_file(Path(hp["eval_path"]).expanduser(), "data.eval_path", hp["eval_size"])
    return None
