"""Data settings that leave no prompt to train on, or no place for one: found before the model loads.

    check_system_prompt(data)                              # data.system_prompt without the chat template
    check_training_data(data, world=2, tokenizer=load)     # fewer prompts than one batch; long_prompts: skip
    training_rows(config["data"])    # 12 for a 12-line train.jsonl; None for a hub dataset (not read twice)
    check_environment_data(data, settings.agent, max_steps=20)   # data.path: null; a mapping's environment column
    check_environment_items(settings.agent, datamodule)    # the same on the data module's rows, as fit starts

The data module found these after the model loaded: a system prompt with ``chat_template: false`` when it
encoded the first prompt, and too few prompts for one global batch (``data.batch_size`` per rank x the ranks) when
its batch sampler was built (also when ``long_prompts: skip`` dropped them). Here the rows are counted
(:func:`training_rows`, below) and, with ``long_prompts: skip``, the first rows measured with the tokenizer
(:func:`~infgrpo.data.first_rows.check_first_rows`, the data module's rule). Where the first rows are all dropped,
every row is measured: later rows may be short enough, and a run with none would stop after the model loaded.

**Counting rows** (nothing tokenized). The data module takes every row of the training split (``tiny``, a folder
of split files, one data file, or ``train_size`` generated prompts of ``reasoning_gym:<task>``), holds
``eval_fraction`` of them out, then keeps the first ``train_size``; :func:`training_rows` counts the same way: a
``.jsonl`` file by its non-blank lines, a ``.parquet`` file by its metadata, ``.json`` / ``.csv`` through
``datasets`` (whose converted copy the data module then reuses). Prompts that ``long_prompts: skip`` drops are not
counted there (they need the tokenizer: :func:`check_skipped_prompts`).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from infgrpo.agent.config import AgentConfig
from infgrpo.agent.tools import environment_class, load_factories
from infgrpo.assets import TINY_DATA_DIR
from infgrpo.data.datamodule import load_rows
from infgrpo.data.first_rows import check_first_rows
from infgrpo.data.in_memory import held_out_count
from infgrpo.data.local_files import FILE_TYPES, split_file
from infgrpo.data.mixture import local_rows
from infgrpo.data.placeholder_rows import SEED_COLUMN
from infgrpo.data.reasoning_tasks import is_reasoning_gym
from infgrpo.settings import ConfigError

ALL_ROWS = 10**12
"""Rows measured when none of the first ones is kept: all of a local source (one of them must be short enough)."""
GENERATED = 1000
"""Training prompts of a ``reasoning_gym:<task>`` source when ``data.train_size`` is null (the data module's)."""


def check_system_prompt(data: Mapping[str, Any]) -> None:
    """A ConfigError naming ``data.system_prompt`` when ``data.chat_template`` is false (no system message to put it
    in); the data module's own message."""
    system = data.get("system_prompt")
    if system and not data.get("chat_template", True):
        raise ConfigError(
            f"data.system_prompt={system[:40]!r} is set but data.chat_template is false, so there is no system "
            "message to put it in; drop it, set data.chat_template true, or put the instructions into "
            "data.prompt_template"
        )


def batch_words(data: Mapping[str, Any], world: int) -> str:
    """``data.batch_size=4 x 2 ranks = 8 prompts``: one global batch, said."""
    size = data.get("batch_size", 4)
    return f"data.batch_size={size} x {world} rank{'s' if world > 1 else ''} = {size * world} prompts"


def check_one_batch(data: Mapping[str, Any], world: int) -> None:
    """A ConfigError naming ``data.train_size`` (or ``data.path``) when the training rows are fewer than one global
    batch of ``data.batch_size`` x ``world`` prompts."""
    rows, size = training_rows(data), data.get("batch_size", 4)
    if rows is None or rows >= size * world:
        return
    fix = f"lower data.batch_size to <= {rows // world}" if rows >= world else f"use at most {rows} ranks"
    source, cap = source_rows(data), data.get("train_size")
    if cap is not None and (source is None or cap <= source):
        raise ConfigError(
            f"data.train_size={cap} is fewer prompts than one batch ({batch_words(data, world)} a step): raise "
            f"data.train_size to >= {size * world}, or {fix}"
        )
    fraction = data.get("eval_fraction") or 0.0
    held = f" after data.eval_fraction={fraction} holds {held_out_count(source or 0, fraction)} out" if fraction else ""
    where = "data.mixture" if data.get("mixture") else f"data.path={data.get('path')!r}"
    raise ConfigError(
        f"{where} has {rows} training rows{held}, fewer than one batch "
        f"({batch_words(data, world)} a step): give more rows, or {fix}"
    )


def check_skipped_prompts(
    data: Mapping[str, Any], world: int, tokenizer: Callable[[], PreTrainedTokenizerBase]
) -> None:
    """With ``data.long_prompts: skip``: a ConfigError when the prompts left are fewer than one batch. The first rows
    are measured; when every one of them is dropped, every row of the (local) source is (one must be kept)."""
    measure = {**data, "eval_size": 0, "max_prompt_length": sys.maxsize, "long_prompts": "skip"}
    lengths = [n for _, _, n in check_first_rows(measure, tokenizer)]  # the first rows of the training split
    if not lengths:
        return
    longest = data["max_prompt_length"]
    source, cap = source_rows(data), data.get("train_size")
    if not any(n <= longest for n in lengths) and not (source is not None and source <= len(lengths)):
        lengths = [n for _, _, n in check_first_rows(measure, tokenizer, head=ALL_ROWS)]  # none kept: measure them all
    read = len(lengths)
    kept, shortest = sum(n <= longest for n in lengths), min(lengths)
    whole_source = source is not None and source <= read  # held-out rows among them: `kept` bounds the rest
    whole_cap = cap is not None and cap <= read and not data.get("eval_fraction")
    every_row = whole_source or whole_cap  # every training row was measured: the counts are certain
    head = f"data.long_prompts='skip' with data.max_prompt_length={longest}"
    if every_row and kept == 0:
        raise ConfigError(
            f"{head} drops every training prompt: all {read} of split {data['train_split']!r} are longer (the "
            f"shortest has {shortest} tokens); raise data.max_prompt_length to >= {shortest}"
        )
    if every_row and kept < data.get("batch_size", 4) * world:
        raise ConfigError(
            f"{head} keeps {kept} of the {read} training prompts, fewer than one batch ({batch_words(data, world)} a "
            f"step): raise data.max_prompt_length (the longest prompt has {max(lengths)} tokens), or lower "
            "data.batch_size"
        )


def check_training_data(data: Mapping[str, Any], world: int, tokenizer: Callable[[], PreTrainedTokenizerBase]) -> None:
    """The checks of the module on the data settings ``data`` (a plain mapping) for ``world`` ranks; ``tokenizer``
    is called only with ``long_prompts: skip`` and local rows to measure."""
    if data.get("train_dataset") is not None:
        return  # in memory (Python): the data module counts its rows
    check_one_batch(data, world)
    if data.get("long_prompts") == "skip":
        check_skipped_prompts(data, world, tokenizer)


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
    if data.get("mixture") is not None:  # its training rows, after its test_split_size (local sources only)
        mixed = local_rows(data)
        return len(mixed[0]) if mixed is not None else None
    path = data.get("path", "tiny")
    if path is None:  # no dataset: trainer.max_steps sets the rows (infgrpo.data.placeholder_rows)
        return None
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


def check_environment_data(data: Mapping[str, Any], agent: AgentConfig, max_steps: Any) -> None:
    """The data an environment needs, before anything loads: ``data.path`` null (no dataset: placeholder rows) needs
    one ``agent.environment`` whose ``reset`` takes the rows' ``prompt`` and ``seed``, and ``trainer.max_steps`` >= 1
    (TRL's rules); a mapping of environments needs rows with an ``environment`` column naming one of them, which is
    checked on every row of local data here (hub data and ``train_dataset`` as fit starts:
    :func:`check_environment_items`). A ConfigError naming the setting, or the file row."""
    placeholders = data.get("path", "tiny") is None and data.get("train_dataset") is None
    if placeholders:
        check_placeholder_environment(agent, max_steps)
    factories = load_factories(agent.environment) if isinstance(agent.environment, Mapping) else {}
    if not factories or placeholders or data.get("train_dataset") is not None:
        return
    path, split = data.get("path", "tiny"), data.get("train_split", "train")
    sources = [(path, split, f"data.path={path!r} (split {split!r})")]
    if data.get("eval_path"):
        sources.append((data["eval_path"], "eval", f"data.eval_path={data['eval_path']!r}"))
    elif data.get("eval_split") and data.get("eval_size", 1) and not data.get("eval_fraction"):
        if path == "tiny" or Path(path).expanduser().is_dir():
            sources.append((path, data["eval_split"], f"data.path={path!r} (held-out split {data['eval_split']!r})"))
    for source, name, where in sources:
        if training_file(source, name) is not None:  # local rows (a hub dataset is checked as fit starts)
            check_environment_rows(load_rows(source, name), factories, where)


def check_placeholder_environment(agent: AgentConfig, max_steps: Any) -> None:
    """``data.path: null``: a ConfigError unless ``agent.environment`` is one environment whose ``reset`` takes the
    placeholder rows' columns (``prompt``, ``seed``) and ``trainer.max_steps`` >= 1 sets the run's length."""
    head = "data.path=None (no dataset: the environment's reset() writes each prompt, TRL's placeholder rows)"
    if not agent.environment:
        raise ConfigError(f"{head} needs model.agent.environment, one environment; give data.path, or an environment")
    if isinstance(agent.environment, Mapping):
        raise ConfigError(
            f"{head}: model.agent.environment is a mapping of environments, which routes each row by its "
            "'environment' column, so it needs data (TRL's rule); give data.path with that column, or one environment"
        )
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError(f"{head} needs trainer.max_steps >= 1, which sets the run's length; got {max_steps!r}")
    (factory,) = load_factories(agent.environment).values()
    cls = environment_class(factory)
    try:
        inspect.signature(cls.reset).bind(None, prompt=[], **{SEED_COLUMN: 0})
    except TypeError:
        raise ConfigError(
            f"{head}: {cls.__name__}.reset cannot take the placeholder rows' columns prompt= and {SEED_COLUMN}=; give "
            f"it **kwargs (TRL passes every column), and draw the task from {SEED_COLUMN} to resume exactly"
        ) from None


def check_environment_rows(rows: list[Mapping[str, Any]], names: Collection[Any], where: str) -> None:
    """A ConfigError naming ``where`` and the 0-based row of the first of ``rows`` whose ``environment`` column is
    missing or none of ``names`` (a mapping of environments routes each row by it)."""
    valid = ", ".join(map(str, names))
    for i, row in enumerate(rows):
        if "environment" not in row:
            raise ConfigError(
                f"{where} row {i} has no 'environment' column, by which model.agent.environment's mapping ({valid}) "
                f"routes each row (TRL's rule); add the column, or give one environment; its columns: {', '.join(row)}"
            )
        if row["environment"] not in names:
            raise ConfigError(
                f"{where} row {i} has environment={row['environment']!r}, which is none of model.agent.environment's "
                f"names: {valid}"
            )


def check_environment_items(agent: AgentConfig, datamodule: Any) -> None:
    """:func:`check_environment_rows` on the data module's training and held-out rows (every row, any source), and
    :func:`check_placeholder_environment`'s environment rules for placeholder rows, as fit starts."""
    if getattr(datamodule, "placeholders", False):
        check_placeholder_environment(agent, getattr(datamodule.trainer, "max_steps", None))
    if not isinstance(agent.environment, Mapping):
        return
    for where, attribute in (("training", "train_items"), ("held-out", "eval_items")):
        items = getattr(datamodule, attribute, None) or []
        check_environment_rows([item["meta"] for item in items], list(agent.environment), where)
