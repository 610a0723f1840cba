"""The first rows of each split checked before the model loads: columns, template and prompt length.

    prompts = check_first_rows(data_settings, load_tokenizer)   # [(split, row, tokens), ...]; ConfigError if bad

The data module reads and tokenizes every row when it sets up, which comes after the model loaded; a wrong
``data.prompt_column`` or ``data.prompt_template``, or a ``data.max_prompt_length`` below the prompts, would
stop the run there. The command line reads the first :data:`ROWS` rows of the training and held-out splits
first (the first lines of a ``.jsonl`` file; other local files through ``datasets``, whose converted copy the
data module then reuses) and applies the data module's own rules to them
(:func:`~infgrpo.data.prompt_rows.prompt_of`, :func:`~infgrpo.data.conversation.encode_prompt`). What is checked
where:

- here (before loading): the columns and template on the first rows of local and ``tiny`` data; their token
  lengths against ``data.max_prompt_length`` (``long_prompts: error``) and, by the caller, the model's context;
- when the data module sets up: every row, and the rows of hub datasets and ``reasoning_gym:<task>`` sources
  (their rows cost a download or a generation: not read twice);
- when fit starts (``GRPOModule.on_fit_start``): every prompt against the context.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from infgrpo.assets import TINY_DATA_DIR
from infgrpo.data.conversation import check_messages, encode_prompt
from infgrpo.data.images import image_root
from infgrpo.data.local_files import FILE_TYPES, split_file
from infgrpo.data.mixture import local_rows
from infgrpo.data.placeholder_rows import placeholder_rows
from infgrpo.data.prompt_rows import row_prompt
from infgrpo.data.reasoning_tasks import is_reasoning_gym
from infgrpo.data.template_options import check_template_kwargs
from infgrpo.data.vision_prompts import first_rows_image_tokens
from infgrpo.settings import ConfigError

ROWS = 64
"""Rows read of each split."""


def jsonl_head(file: Path, n: int) -> list[dict[str, Any]]:
    """The first ``n`` rows of a ``.jsonl`` file, each with every column of those rows (None where it lacks one,
    as ``datasets`` fills them)."""
    rows: list[dict[str, Any]] = []
    with file.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) == n:
                break
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return [{k: r.get(k) for k in columns} for r in rows]


def first_rows(path: str | None, split: str, n: int = ROWS) -> list[dict[str, Any]] | None:
    """The first ``n`` rows of ``split`` of a local (or ``tiny``) source, or of one data file (``split`` unused), or
    placeholder rows (``path`` None: no dataset; their columns are what matters here, not their seeds); None for a
    hub dataset or a reasoning-gym task (their rows are left to the data module), or a file ``datasets`` cannot
    read."""
    if path is None:
        return placeholder_rows(n, 0)
    folder = TINY_DATA_DIR if path == "tiny" else Path(path).expanduser()
    if is_reasoning_gym(path) or not (folder.is_dir() or folder.is_file()):
        return None
    file = folder if folder.is_file() else split_file(folder, split, path)
    if file.suffix == ".jsonl":
        return jsonl_head(file, n)
    import datasets

    try:
        ds = datasets.load_dataset(FILE_TYPES[file.suffix], data_files=str(file), split=f"train[:{n}]")
    except Exception:  # noqa: BLE001 - the data module reports an unreadable file with its reason
        return None
    return [dict(r) for r in ds]


def check_every_conversation(path: str | None, split: str, column: str) -> None:
    """A ConfigError naming the row and ``data.prompt_column`` for the first malformed list of chat messages in a
    local ``.jsonl`` source (one line read at a time; other sources are checked when the data module sets up)."""
    if path is None:  # placeholder rows: well formed
        return
    source = TINY_DATA_DIR if path == "tiny" else Path(path).expanduser()
    file = source if source.is_file() else split_file(source, split, path) if source.is_dir() else None
    if file is None or file.suffix != ".jsonl":
        return
    with file.open(encoding="utf-8") as f:
        rows = (json.loads(line) for line in f if line.strip())
        for i, row in enumerate(rows):
            if isinstance(row.get(column), list):
                check_messages(row[column], column, split, i)


def split_rows(hp: Mapping[str, Any], head: int = ROWS) -> dict[str, tuple[str, list[dict[str, Any]] | None]]:
    """``{split: (the data it is read from, in words; its first rows)}`` of the training split and the held-out one
    the data module reads from local data (rows None where :func:`first_rows` gives none); held-out rows that
    ``data.eval_fraction`` takes from the training split, or a single training file, have no split of their own."""
    path, train = hp["path"], hp["train_split"]
    if hp.get("mixture") is not None:  # read whole (local sources only), as the data module reads it
        mixed = local_rows(hp)
        train_rows, held_out = mixed if mixed is not None else (None, None)
        found = {train: ("data.mixture", train_rows[: min(head, hp.get("train_size") or head)] if mixed else None)}
        if held_out and hp.get("eval_size"):
            found["test"] = ("data.mixture (its test_split_size rows)", held_out[: min(head, hp["eval_size"])])
        return found
    rows = {
        train: (
            f"data.path={path!r} (split {train!r})",
            first_rows(path, train, min(head, hp.get("train_size") or head)),
        )
    }
    eval_path, eval_size = hp.get("eval_path"), min(head, hp.get("eval_size") or 0)
    if eval_size and eval_path is not None:
        rows["eval"] = (f"data.eval_path={eval_path!r}", first_rows(eval_path, "eval", eval_size))
    elif eval_size and hp.get("eval_split") and not hp.get("eval_fraction") and not Path(path or "").is_file():
        split = hp["eval_split"]
        rows[split] = (f"data.path={path!r} (held-out split {split!r})", first_rows(path, split, eval_size))
    return rows


def check_first_rows(
    hp: Mapping[str, Any],
    tokenizer: Callable[[], PreTrainedTokenizerBase],
    tools: Callable[[dict], list[dict]] | None = None,
    template: str | None = None,
    head: int = ROWS,
) -> list[tuple[str, int, int]]:
    """Applies the data module's rules to the first ``head`` rows of the training and held-out splits of the data
    settings ``hp``; returns (split, row, tokens) of every prompt kept, or a ConfigError naming ``data.<field>``.

    ``tokenizer`` is called once, when there are rows to measure. ``tools`` (with ``model.agent``): each row's tool
    schemas, rendered through the chat ``template`` as the data module then renders them
    (:meth:`~infgrpo.data.PromptDataModule.use_tools`).
    """
    if hp.get("train_dataset") is not None:  # in memory (Python): the data module checks its rows
        return []
    rows = {split: got for split, (_, got) in split_rows(hp, head).items()}
    prompts = {s: [row_prompt(r, hp, s, i)[1] for i, r in enumerate(got)] for s, got in rows.items() if got}
    if hp.get("mixture") is None and any(isinstance(p, list) for got in prompts.values() for p in got):  # every row
        sources = {hp["train_split"]: hp["path"], "eval": hp.get("eval_path") or hp["path"]}
        for split in prompts:
            check_every_conversation(sources.get(split, hp["path"]), split, hp["prompt_column"])
    if not prompts:
        return []
    tok, kept = tokenizer(), []
    check_template_kwargs(tok, hp.get("chat_template_kwargs"))
    for split, got in prompts.items():
        if not hp["chat_template"] and any(isinstance(p, list) for p in got):
            raise ConfigError(
                f"data.chat_template is false, but the prompts of split {split!r} are conversations (chat messages in "
                f"data.prompt_column={hp['prompt_column']!r}), which only the chat template can render"
            )
        kwargs = hp.get("chat_template_kwargs")
        schemas = [tools(row) if tools is not None else None for row in rows[split]]
        imaged = first_rows_image_tokens(hp, split, rows[split], got, image_root(hp["path"]), schemas, template)
        system, chat = hp["system_prompt"], hp["chat_template"]
        lengths = [
            imaged[i][0]
            if imaged and imaged[i]
            else len(encode_prompt(tok, p, system, chat, kwargs, tools=t, template=template))
            for i, (p, t) in enumerate(zip(got, schemas, strict=True))
        ]
        longest = max(range(len(lengths)), key=lengths.__getitem__)
        if lengths[longest] > hp["max_prompt_length"] and hp["long_prompts"] == "error":
            images = f", {imaged[longest][1]} of them for its images" if imaged and imaged[longest] else ""
            pixels = " or lower the images' pixels with data.processor_kwargs" if images else ""
            raise ConfigError(
                f"data.max_prompt_length={hp['max_prompt_length']} is below the prompts of split {split!r} (the "
                f"longest of its first {len(lengths)} rows, row {longest}, has {lengths[longest]} tokens{images}) and "
                f"data.long_prompts='error' stops on them; raise data.max_prompt_length{pixels}, or set "
                "data.long_prompts: skip to drop the longer prompts"
            )
        kept += [(split, i, n) for i, n in enumerate(lengths) if n <= hp["max_prompt_length"]]
    return kept
