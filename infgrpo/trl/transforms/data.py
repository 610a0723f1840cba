"""The transforms of the data: the dataset (one, or a mixture in TRL's form or a reasoning recipe's), how its prompts
are rendered, the prompt length and the held-out split of a mixture.

    convert({"datasets": [{"path": "json", "data_files": "a.jsonl"}, {"path": "org/b"}], "test_split_size": 0.1})
    # data.mixture: {datasets: [{path: json, data_files: a.jsonl}, {path: org/b}], test_split_size: 0.1}
    convert({"dataset_mixture": {"datasets": [{"id": "org/a", "weight": 0.5}], "seed": 42}})
    # data.mixture: {datasets: [{path: org/a, weight: 0.5}], seed: 42}: the recipe's shuffles, for its seed

Each function converts the TRL fields it is registered for (:meth:`~.registry.Transforms.converts`) and runs once,
in the order they stand here, after those of :mod:`~infgrpo.trl.transforms.run` (whose held-out evaluation a
mixture's split replaces).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from infgrpo.trl.fields import ConversionError
from infgrpo.trl.keys import Keys
from infgrpo.trl.recipe_rewards import RECIPE_ARGUMENTS, UNUSED_ARGUMENTS
from infgrpo.trl.transforms.registry import Transforms
from infgrpo.trl.transforms.run import named
from infgrpo.trl.trl_settings import TrlSettings

TRANSFORMS = Transforms()
"""This module's transforms by TRL field."""

RECIPE_KEYS = frozenset(
    (
        "system_prompt",
        "dataset_prompt_column",
        "dataset_mixture",
        "chat_template",
        *RECIPE_ARGUMENTS,
        *UNUSED_ARGUMENTS,
        "benchmarks",
    )
)
"""Keys of reasoning recipes' own scripts (open-r1's ``grpo.py`` and its kin), which make every prompt a
conversation: the system prompt, then the prompt column as the user turn."""

SOURCE_FIELDS = ("path", "name", "data_dir", "data_files", "split", "columns", "fraction")
"""TRL's ``DatasetConfig`` fields, each a field of a ``data.mixture`` source."""
RECIPE_SOURCE = {"id": "path", "config": "name", "split": "split", "columns": "columns", "weight": "weight"}
"""The recipe's ``dataset_mixture`` source keys, to ``data.mixture``'s."""


def _entries(value: Any) -> list[dict[str, Any]]:
    """A mixture's sources as plain mappings (TRL's ``DatasetConfig`` objects or mappings)."""
    if isinstance(value, Mapping):  # {datasets: [...], ...}
        value = value.get("datasets")
    return [dataclasses.asdict(e) if dataclasses.is_dataclass(e) else dict(e) for e in value or []]


def trl_mixture(trl: TrlSettings) -> dict[str, Any] | None:
    """``data.mixture`` of TRL's ``datasets`` (its ``DatasetMixtureConfig``): each source's fields as they are (a
    field at TRL's default left out); None without one."""
    entries = _entries(trl["datasets"])
    if not entries:
        return None
    sources = []
    for i, entry in enumerate(entries):
        unknown = [k for k in entry if k not in SOURCE_FIELDS]
        if unknown:
            raise ConversionError(
                f"datasets[{i}].{unknown[0]} is not a field of TRL's DatasetConfig ({', '.join(SOURCE_FIELDS)})"
            )
        if not entry.get("path"):
            raise ConversionError(f"datasets[{i}] has no path (TRL's DatasetConfig needs one)")
        sources.append({k: v for k, v in entry.items() if v is not None and not (k == "split" and v == "train")})
    return {"datasets": sources}


def recipe_mixture(trl: TrlSettings) -> dict[str, Any] | None:
    """``data.mixture`` of a recipe's ``dataset_mixture`` (``{datasets: [{id, config, split, columns, weight}], seed,
    test_split_size}``): the recipe's weight (1.0 where unset, as its parser fills it) and seed (0) written out, so
    the rows are the recipe's; None without one. A ConversionError for what the recipe's parser refuses."""
    value = trl["dataset_mixture"]
    if value is None:
        return None
    if not isinstance(value, Mapping) or not isinstance(value.get("datasets"), list):
        raise ConversionError(
            "dataset_mixture must be a mapping with a datasets list, as the recipe's parser requires: "
            "{datasets: [{id, config, split, columns, weight}], seed, test_split_size}"
        )
    sources = []
    for i, entry in enumerate(_entries(value)):
        unknown = [k for k in entry if k not in RECIPE_SOURCE]
        if unknown or not entry.get("id"):
            what = f"has no field {unknown[0]!r}" if unknown else "has no id"
            raise ConversionError(f"dataset_mixture.datasets[{i}] {what}: a source is {{{', '.join(RECIPE_SOURCE)}}}")
        source = {RECIPE_SOURCE[k]: v for k, v in entry.items() if v is not None}
        source.setdefault("weight", 1.0)  # the recipe's parser: every source shuffled and weighted
        if source.get("split") == "train":
            del source["split"]
        sources.append(source)
    columns = [s["columns"] for s in sources if s.get("columns") is not None]
    if any(set(c) != set(columns[0]) for c in columns):
        raise ConversionError(
            f"dataset_mixture: the sources' columns differ ({columns}); the recipe's parser refuses that: give every "
            "source the same columns"
        )
    return {"datasets": sources, "seed": value.get("seed", 0)}


@TRANSFORMS.converts("dataset_name", "datasets", "dataset_mixture", "max_prompt_length")
def _dataset(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """``data.path`` (TRL's ``dataset_name``), or ``data.mixture`` (TRL's ``datasets``, a recipe's
    ``dataset_mixture``); prompts rendered as TRL renders them; TRL 1.16 has no prompt length limit, infgrpo refuses
    prompts over ``data.max_prompt_length``."""
    recipe = trl.is_set("dataset_mixture")
    mixture = recipe_mixture(trl) if recipe else trl_mixture(trl)
    if mixture is None:
        named(trl, out, notes, "dataset_name", "data.path")
    else:
        if trl["dataset_name"] is not None:
            notes.append(f"dataset_name={trl['dataset_name']!r} ignored: the dataset mixture is read, as in TRL")
        out.put("data.mixture", mixture, True)
        out.put("data.eval_split", None, True)  # a mixture's held-out rows come from its test_split_size
        count = len(mixture["datasets"])
        if recipe:
            notes.append(
                f"dataset_mixture (a reasoning recipe's, {count} source{'s' * (count > 1)}, seed {mixture['seed']}): "
                "data.mixture with its seed: each source shuffled with it and cut to its weight, concatenated, "
                "shuffled and split with it, as the recipe does: its rows for its seed"
            )
        else:
            notes.append(
                f"datasets (TRL's mixture of {count}): data.mixture, the sources concatenated in order (columns a "
                "source lacks are None), as TRL's get_dataset"
            )
    if trl.any_set(*RECIPE_KEYS):
        out.put("data.as_conversation", True, True)
        notes.append(
            "a reasoning recipe's script makes each prompt a conversation (its system_prompt, then the prompt column "
            "as the user turn): data.as_conversation: true does so, and rewards get chat-message completions as the "
            "recipe's read them"
        )
    else:
        out.put("data.chat_template", "conversations", True)
        notes.append(
            "data.chat_template: conversations, TRL's rule: a string prompt is tokenized as it is (TRL applies no chat "
            "template to it), a conversational one goes through the tokenizer's chat template"
        )
    if trl.is_set("max_prompt_length"):
        out.put("data.max_prompt_length", trl.integer("max_prompt_length"), True)
        notes.append(
            f"max_prompt_length={trl['max_prompt_length']}: data.max_prompt_length; older TRL cut longer prompts from "
            "the left, infgrpo stops on one (data.long_prompts: skip leaves them out)"
        )
    else:
        notes.append(
            f"data.max_prompt_length={out.default('data.max_prompt_length')} (infgrpo's default) bounds the prompts; "
            "TRL 1.16 has no prompt limit: raise it for longer prompts, or set data.long_prompts: skip"
        )


def _split_size(trl: TrlSettings) -> tuple[str, Any]:
    """TRL's ``test_split_size`` as (its name in the notes, its value): a recipe's mixture mapping's
    (``dataset_mixture: {datasets, test_split_size}``), else the top level's (``DatasetMixtureConfig``'s)."""
    for field in ("dataset_mixture", "datasets"):
        if isinstance(trl[field], Mapping) and trl[field].get("test_split_size") is not None:
            return f"{field}.test_split_size", trl[field]["test_split_size"]
    return "test_split_size", trl["test_split_size"]


@TRANSFORMS.converts("test_split_size")
def _test_split(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """TRL's script splits a dataset mixture into train and test rows, and evaluates on the test rows:
    ``data.mixture.test_split_size`` (TRL's form: infgrpo's seeded draw; the recipe's: its split, with its seed)."""
    field, size = _split_size(trl)
    mixture = out.get("data.mixture")
    if size is None:
        return
    if mixture is None:
        notes.append(
            f"{field}={size} ignored: TRL's grpo script splits a datasets mixture only (dataset_name is read as it "
            "is); data.eval_fraction holds out a share of the training rows"
        )
        return
    share = isinstance(size, float) and 0 < size < 1
    if not share and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ConversionError(
            f"{field}={size!r} must be a share of the rows in (0, 1) or a number of rows >= 1 (datasets' "
            "train_test_split test_size)"
        )
    out.put("data.mixture", {**mixture, "test_split_size": size}, True)
    evaluated = trl["eval_strategy"] != "no"
    if not evaluated:
        out.put("data.eval_size", 0, True)
    drawn = (
        "split with the recipe's seed, as its train_test_split"
        if "seed" in mixture
        else "drawn with data.seed (TRL's split is unseeded), as many as TRL's"
    )
    notes.append(
        f"{field}={size}: data.mixture.test_split_size, the held-out rows {drawn}; "
        + (
            "the first data.eval_size of them are scored, TRL scores all"
            if evaluated
            else "eval_strategy=no: none scored (data.eval_size: 0), as in TRL"
        )
    )
