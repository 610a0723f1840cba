"""A dataset row's prompt: its prompt column (a string, or chat messages), or ``data.prompt_template`` over its columns.

    row, text = prompt_of({"question": "2+2?", "answer": "4"}, "question", "answer", None, "train")
    row, messages = prompt_of({"prompt": [{"role": "user", "content": "2+2?"}]}, "prompt", None, None, "train", 0)
    row, messages = row_prompt({"problem": "2+2?"}, {"prompt_column": "problem", "as_conversation": True}, "train", 0)

The one rule the data module applies to every row when it sets up, and the command line to the first rows
before the model loads (:mod:`infgrpo.data.first_rows`); errors name the setting, the split and its columns.
:func:`row_prompt` applies it with the data settings, ``data.as_conversation`` included: a string prompt becomes a
conversation (``data.system_prompt``, then the prompt as the user turn), as reasoning recipes' scripts make every
prompt one. A conversation that ends with an assistant message is refused (the chat template would open a second
assistant turn after it; TRL renders it so without a word).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infgrpo.data.conversation import Prompt, check_messages
from infgrpo.settings import ConfigError


def prompt_of(
    row: dict[str, Any],
    prompt_column: str,
    answer_column: str | None,
    prompt_template: str | None,
    split: str,
    index: int = 0,
) -> tuple[dict[str, Any], Prompt]:
    """(the row, with ``answer`` from ``answer_column`` when set; its prompt: text, or the list of chat messages of a
    conversational row, TRL's format); a ConfigError naming ``data.prompt_column``, ``data.answer_column`` or
    ``data.prompt_template`` (and the 0-based row ``index``) when the row cannot give them."""
    columns = ", ".join(row)
    if prompt_column not in row:
        raise ConfigError(
            f"data.prompt_column={prompt_column!r} is not a column of split {split!r}; columns: {columns}"
        )
    if answer_column is not None:
        if answer_column not in row:
            raise ConfigError(
                f"data.answer_column={answer_column!r} is not a column of split {split!r}; columns: {columns}"
            )
        row = {**row, "answer": row[answer_column]}
    value = row[prompt_column]
    if isinstance(value, list):  # TRL's conversational format (an empty or malformed list is named, not stringified)
        check_messages(value, prompt_column, split, index)
        if value[-1]["role"] == "assistant":
            raise ConfigError(
                f"row {index} of split {split!r} (data.prompt_column={prompt_column!r}) ends with an assistant message "
                f"({value[-1]['content'][:40]!r}); the chat template would open a second assistant turn after it. A "
                "prompt ends with the user's (or a tool's) turn: drop the last message, or keep a reference answer "
                "in a column of its own (e.g. solution)"
            )
        if prompt_template is not None:
            raise ConfigError(
                f"data.prompt_template is set, but data.prompt_column={prompt_column!r} holds chat messages (row "
                f"{index} of split {split!r}); a template formats string prompts: drop data.prompt_template"
            )
        return row, value
    if isinstance(value, dict):
        raise ConfigError(
            f"row {index} of split {split!r}: data.prompt_column={prompt_column!r} holds a mapping "
            f"({str(value)[:60]}); a prompt is a string or a list of {{role, content}} messages"
        )
    if prompt_template is None:
        return row, str(row[prompt_column])
    try:
        return row, prompt_template.format(**row)
    except KeyError as err:
        raise ConfigError(
            f"data.prompt_template names column {err} that split {split!r} lacks; columns: {columns}"
        ) from err
    except (IndexError, ValueError) as err:  # "{}", "{0}", a lone brace, a format spec the value does not take
        raise ConfigError(
            f"data.prompt_template={prompt_template!r} cannot format a row of split {split!r} "
            f"({type(err).__name__}: {err}); it is a str.format template over the columns: {columns}"
        ) from err


def row_prompt(row: dict[str, Any], hp: Mapping[str, Any], split: str, index: int = 0) -> tuple[dict[str, Any], Prompt]:
    """:func:`prompt_of` with the data settings ``hp`` (``prompt_column``, ``answer_column``, ``prompt_template``);
    with ``as_conversation``, a string prompt becomes ``[system (data.system_prompt), user]`` messages, as a
    reasoning recipe's script builds its prompts (TRL's conversational format from then on: rewards get the messages
    as ``prompts`` and each completion as ``[{"role": "assistant", "content": text}]``)."""
    row, prompt = prompt_of(
        row, hp.get("prompt_column", "prompt"), hp.get("answer_column"), hp.get("prompt_template"), split, index
    )
    if isinstance(prompt, str) and hp.get("as_conversation"):
        system = [{"role": "system", "content": hp["system_prompt"]}] if hp.get("system_prompt") else []
        prompt = [*system, {"role": "user", "content": prompt}]
    return row, prompt
