"""How a reward function is called: TRL 1.16's convention (by keyword), or infgrpo 0.2's (detected and served)::

    kwargs = trl_kwargs(fn, RewardInputs(texts, rows, prompts, completion_ids), RewardLog())
    values = fn(**kwargs)

**TRL's convention** (``GRPOTrainer._calculate_rewards``), the one for new code and the built-ins::

    def my_reward(prompts, completions, completion_ids, solution, trainer_state, log_extra, log_metric, **kwargs):
        ...

- ``completions``: strings for standard rows; one-message lists ``[{"role": "assistant", "content": text}]`` for
  conversational ones (a row whose prompt is a list of chat messages);
- ``prompts``: each completion's prompt as the dataset gave it (a string after ``data.prompt_template``, or the
  messages); ``completion_ids``: its token ids (stop token removed);
- every dataset column (but ``prompt``, ``completion`` and ``completion_ids``, as TRL) as a list with one value
  per completion, by its name (``solution``, ``answer``, ...);
- ``trainer_state`` (:class:`TrainerState`: ``global_step``, ``max_steps``, ``epoch``), ``log_extra(column,
  values)`` (a column of the completion table), ``log_metric(name, value)`` (``train/<name>`` in the logs);
- infgrpo adds ``completion_lengths`` (tokens) and ``max_completion_length`` (``sampler.max_new_tokens``);
- a multi-turn rollout (tools) gives ``completions`` as its exchange, the message list (assistant, tool, ...,
  assistant) TRL hands them, and its extra keywords (``environments``: one instance per completion) by name.

A function with ``**kwargs`` gets all of them; one without gets the ones it names. ``async def`` functions (or
objects with an async ``__call__``) run concurrently, as TRL runs them.

**infgrpo 0.2's convention** ``fn(completions: list[str], metadata: list[dict], **info)`` — told apart by its
second parameter, named ``metadata`` — is still served (``info``: ``completion_lengths``,
``max_completion_length``) with a warning once per function saying how to port it; it goes in 0.4.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from infgrpo.rewards.returns import RewardError, abbreviated, is_number
from infgrpo.settings import InfgrpoFutureWarning

EXCLUDED_COLUMNS = ("prompt", "completion", "completion_ids")
"""Columns TRL does not pass by name (the prompt reaches the function as ``prompts``)."""
PASSED = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
"""What TRL's convention passes besides the columns."""
INFO_KEYS = ("completion_lengths", "max_completion_length")
"""What infgrpo passes besides TRL's (and 0.2's ``**info``)."""
AGENT_KEYS = ("environments",)
"""What a run with an environment (``agent.environment``) passes besides: one instance per completion (TRL's)."""

_WARNED: set[str] = set()


@dataclass(frozen=True)
class TrainerState:
    """What TRL's ``trainer_state`` tells reward code: the step, the planned steps and the epoch (fractional)."""

    global_step: int = 0
    """Optimizer steps taken so far (Lightning's ``trainer.global_step``)."""
    max_steps: int = -1
    """The run's ``trainer.max_steps`` (-1: set by epochs)."""
    epoch: float = 0.0
    """Epochs done, fractional (TRL's ``state.epoch``)."""


@dataclass
class RewardLog:
    """What reward functions log during one scoring call: extra table columns and scalar metrics."""

    extra: dict[str, list[Any]] = field(default_factory=dict)
    """``log_extra(column, values)``: a completion-table column, one value per completion."""
    metrics: dict[str, list[float]] = field(default_factory=dict)
    """``log_metric(name, value)``: values, averaged into ``train/<name>``."""

    def log_extra(self, column: str, values: Sequence[Any]) -> None:
        """TRL's ``log_extra``: adds ``values`` (one per completion) to the completion table's ``column``."""
        self.extra.setdefault(column, []).extend(values)

    def log_metric(self, name: str, value: float) -> None:
        """TRL's ``log_metric``: a scalar averaged into this step's ``train/<name>``; a RewardError naming
        ``log_metric`` for anything but one number (whatever ``rewards.on_error`` says: a bug of the reward)."""
        if isinstance(value, bool) or not is_number(value):
            raise RewardError(
                f"log_metric({name!r}, {abbreviated(value)}): the value must be one number (a float) for "
                f"train/{name}, not a {type(value).__name__}; log one number per call (a mean), or one value per "
                "completion with log_extra (a completion-table column)"
            )
        self.metrics.setdefault(name, []).append(float(value))

    def means(self) -> dict[str, float]:
        """Each logged metric's mean."""
        return {k: sum(v) / len(v) for k, v in self.metrics.items() if v}


@dataclass
class RewardInputs:
    """What one scoring call knows, one entry per completion (N)."""

    completions: list[str]
    """Decoded completions (special tokens skipped)."""
    rows: list[dict[str, Any]]
    """Each completion's dataset row (every column)."""
    prompts: list[Any] | None = None
    """Each completion's prompt as the dataset gave it (text or chat messages); None: the rows' ``prompt``."""
    completion_ids: list[list[int]] | None = None
    """Each completion's token ids."""
    completion_lengths: list[int] | None = None
    """Each completion's length in tokens."""
    max_completion_length: int | None = None
    """The sampler's ``max_new_tokens``."""
    trainer_state: TrainerState | None = None
    """The run's progress (a fresh :class:`TrainerState` when None)."""
    messages: list[Any] | None = None
    """Each completion as rewards receive it, when the rollout gives it (a multi-turn rollout's message list);
    None: built from ``completions`` (:func:`completion_values`)."""
    extra: dict[str, list[Any]] = field(default_factory=dict)
    """More keyword arguments, one value per completion each, for every TRL-convention function (``environments``)."""

    def prompt_list(self) -> list[Any]:
        """``prompts``, or each row's ``prompt`` column."""
        return self.prompts if self.prompts is not None else [row.get("prompt") for row in self.rows]


def parameters(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    """``fn``'s parameters (a callable object's ``__call__``'s); None when it has no readable signature."""
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


def takes_metadata(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is written in infgrpo 0.2's convention: its second parameter is named ``metadata``."""
    params = [p for p in parameters(fn) or [] if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(params) >= 2 and params[1].name == "metadata"


def is_async(fn: Callable[..., Any]) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    method = getattr(type(fn), "__call__", None)  # noqa: B004 - the class's method: an instance's async __call__
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(method)


def named_only(fn: Callable[..., Any], offered: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``offered`` that ``fn`` takes: all of them with ``**kwargs``, else the ones it names."""
    params = parameters(fn)
    if params is None or any(p.kind is p.VAR_KEYWORD for p in params):
        return offered
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in offered.items() if k in named}


def required_names(fn: Callable[..., Any]) -> list[str]:
    """The parameters ``fn`` needs by name (no default): what TRL's call must supply, columns included."""
    return [
        p.name
        for p in parameters(fn) or []
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


def needed_columns(fn: Callable[..., Any]) -> list[str]:
    """The dataset columns ``fn`` (TRL's convention) needs: its required parameters that TRL's call does not pass
    otherwise (``solution`` of ``accuracy_reward``). [] for a 0.2-convention function."""
    if takes_metadata(fn):
        return []
    return [name for name in required_names(fn) if name not in (*PASSED, *INFO_KEYS, *AGENT_KEYS)]


def completion_texts(completions: Sequence[Any]) -> list[str]:
    """The text of each completion: a string as it is, a conversational one's (last) message content (the built-ins
    score both forms)."""
    return [c[-1]["content"] if isinstance(c, list) else c for c in completions]


def completion_values(inputs: RewardInputs) -> list[Any]:
    """``completions`` as TRL gives them: the text, or ``[{"role": "assistant", "content": text}]`` where the
    completion's prompt is a conversation; ``inputs.messages`` when given (a multi-turn rollout's exchanges)."""
    if inputs.messages is not None:
        return list(inputs.messages)
    return [
        [{"role": "assistant", "content": text}] if isinstance(prompt, list) else text
        for text, prompt in zip(inputs.completions, inputs.prompt_list(), strict=True)
    ]


def trl_kwargs(fn: Callable[..., Any], inputs: RewardInputs, log: RewardLog) -> dict[str, Any]:
    """The keyword arguments TRL's convention gives ``fn`` (see the module docstring), filtered to what it takes."""
    columns = [k for k in dict.fromkeys(k for row in inputs.rows for k in row) if k not in EXCLUDED_COLUMNS]
    offered: dict[str, Any] = {k: [row.get(k) for row in inputs.rows] for k in columns}
    offered.update(inputs.extra)  # after the columns, as TRL adds environments
    offered.update(
        prompts=inputs.prompt_list(),
        completions=completion_values(inputs),
        completion_ids=inputs.completion_ids,
        trainer_state=inputs.trainer_state or TrainerState(),
        log_extra=log.log_extra,
        log_metric=log.log_metric,
        completion_lengths=inputs.completion_lengths,
        max_completion_length=inputs.max_completion_length,
    )
    return named_only(fn, offered)


def call_args(name: str, fn: Callable[..., Any], inputs: RewardInputs, log: RewardLog) -> tuple[tuple, dict]:
    """(positional, keyword) arguments of ``fn``'s call: TRL's keywords, or 0.2's ``(completions, metadata,
    **info)`` with a warning once per reward name."""
    if not takes_metadata(fn):
        return (), trl_kwargs(fn, inputs, log)
    if name not in _WARNED:
        _WARNED.add(name)
        warnings.warn(
            f"[infgrpo] reward {name!r} takes (completions, metadata, ...), infgrpo 0.2's convention, served until "
            "0.4; port it to TRL's: fn(completions, **kwargs), with dataset columns by name (metadata[i]['answer'] "
            "-> answer[i]), prompts, completion_ids and trainer_state",
            InfgrpoFutureWarning,
            stacklevel=3,
        )
    info = {"completion_lengths": inputs.completion_lengths, "max_completion_length": inputs.max_completion_length}
    return (inputs.completions, inputs.rows), named_only(fn, info)
