"""A reward function's signature checked against the call it will get, when the settings are built.

    check_reward_call("my_pkg.rewards:score", score)   # ConfigError unless TRL's call (or 0.2's) can bind
    needed_columns(accuracy_reward)                     # ["solution"]: checked against the data's columns
    check_reward_data(functions, rows, prompts, "the held-out split")   # columns, and conversational completions

Rewards are called in TRL's convention, by keyword (:mod:`infgrpo.rewards.calls`); a function whose second
parameter is ``metadata`` gets infgrpo 0.2's ``fn(completions, metadata, **info)``. A function that can take
neither (positional-only parameters, ``*args`` and nothing else) would fail at the first step, after the model
loaded and the first rollout decoded; binding the signature finds it before anything loads. The dataset columns a
TRL-convention function needs (its required parameters that TRL's call does not pass otherwise) are checked
against the data's first rows by the command line, before the model loads
(:func:`~infgrpo.training.preflight.model_data.check_before_loading`), and against the rows when fit starts, for
the training and the held-out rows alike. So is the kind of completion a function reads: one whose ``completions``
parameter is annotated as chat messages (``list[list[dict[str, str]]]``: TRL's ``accuracy_reward``,
``reasoning_accuracy_reward``, ``think_format_reward`` and ``get_cosine_scaled_reward``'s read
``completion[0]["content"]``), or whose own code reads ``completion[0]["content"]`` without testing the value's
type (the recipes' unannotated rewards), cannot score the plain-string completions of string prompts (TRL stops there
with a ``TypeError`` at the first step).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from infgrpo.rewards.calls import AGENT_KEYS, INFO_KEYS, PASSED, named_only, needed_columns, parameters, takes_metadata
from infgrpo.settings import ConfigError

EXPECTED = (
    "fn(completions, **kwargs) -> list[float], TRL's convention (dataset columns, prompts, completion_ids, "
    "trainer_state, log_extra, log_metric by keyword)"
)


def check_reward_call(name: str, fn: Any) -> None:
    """Raises a ConfigError naming ``functions[name]`` when ``fn`` cannot be called the way rewards are."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable without a signature: nothing to check
        return
    try:
        if takes_metadata(fn):
            signature.bind([], [], **named_only(fn, dict.fromkeys(INFO_KEYS)))
        else:
            offered = dict.fromkeys([*PASSED, *INFO_KEYS, *AGENT_KEYS, *needed_columns(fn)])
            signature.bind(**named_only(fn, offered))
    except TypeError as err:
        raise ConfigError(
            f"functions[{name!r}] has the signature {signature}, which cannot take the call rewards get "
            f"({err}); a reward must accept {EXPECTED}, or infgrpo 0.2's fn(completions, metadata, **info)"
        ) from err


def check_reward_columns(functions: Iterable[str], columns: Iterable[str], where: str) -> None:
    """A ConfigError naming the reward, the column it needs and the columns ``where`` has, for the first reward of
    ``functions`` (names) that needs a dataset column the data lacks."""
    from infgrpo.rewards.core import resolve_reward  # the registry's module imports this one

    have = list(columns)
    for name in functions:
        missing = [c for c in needed_columns(resolve_reward(name)) if c not in have]
        if missing:
            raise ConfigError(
                f"reward {name!r} needs the dataset column {missing[0]!r} (its parameter {missing[0]}), which {where} "
                f"lacks; columns: {', '.join(have)}. Give the data a {missing[0]!r} column (or a reward that reads "
                "one it has)"
            )


_READS_MESSAGE = re.compile(r"\[\s*-?\d+\s*\]\s*\[\s*[\"']content[\"']\s*\]")
"""``completion[0]["content"]``, ``c[-1]['content']``: code that reads a completion as chat messages."""


def reads_messages(fn: Any) -> str | None:
    """``completion[0]['content']`` when ``fn``'s own source reads a completion as chat messages (the recipes'
    unannotated rewards) and never tests a value's type (``isinstance``: it may read text too), else None."""
    target = getattr(fn, "func", fn)  # a partial: the function it binds
    target = target if inspect.isfunction(target) or inspect.ismethod(target) else type(target).__call__
    try:
        source = inspect.getsource(target)
    except (OSError, TypeError):
        return None
    found = _READS_MESSAGE.search(source)
    return "completion[0]['content']" if found and "isinstance" not in source else None


def conversation_annotation(fn: Any) -> str | None:
    """The annotation of ``fn``'s ``completions`` parameter when it reads as a list of chat messages per completion
    (``list[list[dict[str, str]]]``, as TRL's conversational rewards declare it), else None."""
    param = next((p for p in parameters(fn) or [] if p.name == "completions"), None)
    if param is None or param.annotation is param.empty:
        return None
    text = param.annotation if isinstance(param.annotation, str) else str(param.annotation)
    text = text.replace("typing.", "").replace(" ", "")
    return text if text.lower().startswith("list[list[dict") else None


def check_reward_data(
    functions: Iterable[str], rows: Sequence[Mapping[str, Any]], prompts: Sequence[Any], where: str
) -> None:
    """A ConfigError for the first reward of ``functions`` (names) that ``rows`` (their prompts: ``prompts``)
    cannot feed: a dataset column it needs that the rows lack (:func:`check_reward_columns`), or chat-message
    completions where a prompt is a string (:func:`conversation_annotation`). ``where`` names the rows."""
    from infgrpo.rewards.core import resolve_reward  # the registry's module imports this one

    names = list(functions)
    check_reward_columns(names, dict.fromkeys(k for row in rows for k in row), where)
    text = next((i for i, p in enumerate(prompts) if not isinstance(p, list)), None)
    for name in names if text is not None else []:
        fn = resolve_reward(name)
        annotation = conversation_annotation(fn)
        reads = f"its completions parameter is {annotation}" if annotation else None
        reads = reads or (f"its code reads {reads_messages(fn)}" if reads_messages(fn) else None)
        if reads is not None:
            raise ConfigError(
                f"reward {name!r} reads conversational completions ({reads}: completion[0]['content']), but the "
                f"prompts of {where} are strings (row {text}), so its completions are strings and it would stop at "
                "the first step (TRL stops there too, with a TypeError); set data.as_conversation: true (each string "
                "prompt becomes a [system, user] conversation, as reasoning recipes build them), give the data "
                "conversational prompts (lists of {role, content} messages in data.prompt_column), or use a reward "
                "that reads text (the built-ins read both)"
            )
