"""The reward registry and the weighted, validated computation of rewards.

Reward functions are called in TRL 1.16's convention (:mod:`infgrpo.rewards.calls`)::

    def my_reward(completions, answer, **kwargs) -> list[float]: ...

``completions[i]`` is completion i (a string, or ``[{"role": "assistant", "content": text}]`` for a
conversational row) and every dataset column arrives by name, one value per completion (``answer[i]``), with
``prompts``, ``completion_ids``, ``trainer_state``, ``log_extra`` and ``log_metric``; functions written for TRL's
``GRPOTrainer`` run unchanged. infgrpo 0.2's ``fn(completions, metadata, **info)`` is still served (with a
warning). Select built-ins by name, any importable callable as ``"package.module:function"`` (a factory's call
with literal arguments too: ``"trl.rewards:get_soft_overlong_punishment(max_completion_len=256,
soft_punish_cache=64)"``), a sequence-classification reward model by its folder or hub id, or anything
registered in Python with :func:`register_reward`.

TRL 1.16's rules, with no setting (``tests/rewards`` checks them against TRL's own functions):

- ``None`` (or NaN, which TRL cannot tell from it) means *the function does not apply to this row* (a math reward
  on a code row of a multi-task dataset): the function is left out of the row's weighted sum (NaN-sum). A row that
  no function applies to is *unscorable*: its reward is NaN, it is left out of its group's mean and std and of the
  logged reward, and its advantage is 0 (rewards [1, None, 0, 1] give advantages [0.58, 0, -1.15, 0.58]). TRL
  logs a warning naming such a row; here it is an :class:`~infgrpo.settings.InfgrpoWarning` with the count, each
  time it happens.
- an exception, or an infinite value (TRL would sum it: the group's advantages become NaN, then 0, silently), is a
  *failure*. ``rewards.on_error`` says what a failure does:

  - ``raise`` (default, as TRL): stop with a :class:`RewardError` naming the function (and the row, for a value);
  - ``skip``: the failed values are left out, as a None is; an :class:`~infgrpo.settings.InfgrpoWarning` names
    the function, the error and the completions it cost, with the running count, each time it happens;
  - ``zero``: the failed values score 0, which enters its group's mean and std like any reward (so a failed row
    of rewards [1, fail, 0, 1] gets advantage -0.87: it is pushed down); warned the same way.

  The completions with a failed value are counted in ``train/rewards_failed`` too.

Anything but a sequence of numbers and Nones, one per completion, is a bug of the function: a :class:`RewardError`
whatever ``rewards.on_error`` says (:mod:`infgrpo.rewards.returns`); so is a ``log_extra`` column with other than
one value per completion (it would shift the completion table's rows).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from infgrpo.registry import Registry, check_choice, choices
from infgrpo.rewards.async_calls import run_concurrently
from infgrpo.rewards.calls import RewardInputs, RewardLog, TrainerState, call_args, is_async
from infgrpo.rewards.returns import RewardError, abbreviated, failure_cause, reward_values
from infgrpo.rewards.sources import resolve_source
from infgrpo.settings import ConfigError, InfgrpoWarning

RewardFn = Callable[..., Sequence[float | None]]
REWARDS = Registry("rewards")
OnError = Literal["raise", "zero", "skip"]
"""What a failed reward (an exception, an infinite value) does (``rewards.on_error``; see the module docstring)."""
FAILURES: Counter[str] = Counter()
"""This process's failed values skipped or zeroed so far, by reward name (the warnings give the running count)."""
UNSCORED: Counter[str] = Counter()
"""This process's unscorable completions so far (``"completions"``; the warning gives the running count)."""
_REGISTERED: set[str] = set()
"""The names :func:`register_reward` registered (it may replace those; the built-ins it refuses)."""


def check_on_error(on_error: str, field: str = "rewards.on_error") -> str:
    """Validates ``on_error`` (raise, zero or skip) and returns it."""
    return check_choice(field, on_error, choices(OnError))


def resolve_reward(name: str) -> RewardFn:
    """A registered name, ``"module.path:function"`` of any importable callable (or a factory's call,
    ``"module:factory(key=literal, ...)"``), or the folder / hub id of a sequence-classification reward model
    (loaded once; see :mod:`infgrpo.rewards.sources`)."""
    if name in REWARDS:
        return REWARDS.get(name)
    return resolve_source(name, REWARDS)


def register_reward(name: str, fn: Any, **reward_model: Any) -> str:
    """Registers ``fn`` as the reward ``name`` (usable in ``rewards.functions``), for rewards made in Python: a
    factory's result (``get_soft_overlong_punishment(256, 64)``), a closure, or a sequence-classification model
    (a ``PreTrainedModel``: wrapped in :class:`~infgrpo.rewards.reward_model.RewardModel` with ``reward_model``'s
    options, e.g. ``tokenizer=``). Registering one of your names again replaces it. Returns ``name``.

    A built-in's name (``synthetic``, ``overlong``, ...) is refused with a ConfigError: replacing it would change,
    for the rest of the process, every run that names the built-in (``synthetic`` is the default reward and
    accuracy), while its logs still show the built-in's name."""
    import torch.nn as nn

    if name in REWARDS and name not in _REGISTERED:
        raise ConfigError(
            f"register_reward({name!r}, ...): {name!r} is a built-in reward (built-ins: {', '.join(REWARDS.names())}) "
            f"and is not replaced; register yours under another name, e.g. register_reward('my_{name}', ...)"
        )

    if isinstance(fn, nn.Module):
        from infgrpo.rewards.reward_model import RewardModel

        fn = RewardModel(fn, **reward_model)
    elif not callable(fn):
        raise TypeError(f"register_reward({name!r}, ...) needs a callable or a model; got {type(fn).__name__}")
    REWARDS.replace(name, fn)
    _REGISTERED.add(name)
    return name


def check_rewards(rewards: dict[str, float]) -> dict[str, float]:
    """Validates a ``{name: weight}`` mapping at config time."""
    if not rewards:
        raise ValueError("rewards: at least one reward function is needed, e.g. {'synthetic': 1.0}")
    for name, weight in rewards.items():
        resolve_reward(name)
        if not math.isfinite(float(weight)):
            raise ValueError(f"rewards[{name!r}]={weight!r} must be a finite number")
    return rewards


@dataclass
class RewardScores:
    """The rewards of N completions: the weighted total, each function's values, and which failed."""

    total: torch.Tensor
    """(N,) float32 weighted sum of the values that apply (NaN-sum); NaN where none does (unscorable)."""
    parts: dict[str, torch.Tensor]
    """Each reward function's raw (N,) values: NaN where it returned None (or failed under ``skip``), 0 where it
    failed under ``zero``."""
    failed: torch.Tensor
    """(N,) bool: the completions for which at least one reward failed (raised, or gave an infinite value)."""
    log: RewardLog = field(default_factory=RewardLog)
    """What the functions logged: ``log_extra`` columns and ``log_metric`` values."""


def correct_answers(values: torch.Tensor) -> torch.Tensor:
    """1.0 where a reward's ``values`` (N,) are >= 1 (a correct answer), 0.0 elsewhere; failed (NaN) values left out.

    ``correct_answers(v).mean()`` is the accuracy (NaN when every value failed).
    """
    return (values[~values.isnan()] >= 1.0).float()


def correct_rows(parts: Mapping[str, torch.Tensor], accuracy: str | None) -> torch.Tensor | None:
    """The accuracy of scored completions, per completion: :func:`correct_answers` of the accuracy reward's values
    (``parts[accuracy]``; failed ones left out), or None when the run has no accuracy reward (``accuracy`` None).

    The one place accuracy is computed: its mean is ``train/accuracy`` (NaN when every value failed) and
    :func:`~infgrpo.evaluation.evaluate`'s; ``val/accuracy`` is its mean over every held-out batch.
    """
    return correct_answers(parts[accuracy]) if accuracy is not None else None


def score_rewards(
    rewards: Mapping[str, float | tuple[RewardFn, float]],
    completions: list[str],
    metadata: list[dict],
    on_error: str = "raise",
    completion_lengths: list[int] | None = None,
    max_completion_length: int | None = None,
    *,
    prompts: list[Any] | None = None,
    completion_ids: list[list[int]] | None = None,
    trainer_state: TrainerState | None = None,
    messages: list[Any] | None = None,
    reward_kwargs: Mapping[str, list[Any]] | None = None,
) -> RewardScores:
    """Weighted sum of the reward functions over ``completions``, with each function's values and the failures.

    ``metadata[i]`` is completion i's dataset row (its columns reach TRL-convention functions by name),
    ``prompts[i]`` its prompt as the dataset gave it (default: the row's ``prompt``). A None (or NaN) value leaves
    its function out of the row's sum (NaN-sum), and a row with no value at all is NaN, with a warning; a function
    that raises or returns inf is a failure: a :class:`RewardError` naming the function under ``on_error="raise"``,
    left out (``"skip"``) or scored 0 (``"zero"``) with a warning (see the module docstring). ``async`` functions
    run concurrently, after the others.

    ``rewards`` maps a reward's name to its weight (the name resolved by :func:`resolve_reward`), or to a
    ``(function, weight)`` pair for a function given as it is (an environment's ``get_reward``, named after its
    class, weight 1, as TRL adds it), called and logged as the others are.

    A multi-turn rollout (tools) may give ``messages`` (what functions get as ``completions``: each completion's
    exchange; ``completions`` stay the decoded texts) and ``reward_kwargs`` (more keyword arguments, one value per
    completion: ``environments``).
    """
    check_on_error(on_error)
    n, log = len(completions), RewardLog()
    extra = dict(reward_kwargs or {})
    given = {"the completions given (messages)": messages, **{f"reward_kwargs[{k!r}]": v for k, v in extra.items()}}
    for what, values in given.items():
        if values is not None and len(values) != n:
            raise ValueError(f"{what} has {len(values)} values for {n} completions; give one per completion")
    inputs = RewardInputs(
        completions, metadata, prompts, completion_ids, completion_lengths, max_completion_length, trainer_state,
        messages, extra,
    )  # fmt: skip
    fns = {name: given[0] if isinstance(given, tuple) else resolve_reward(name) for name, given in rewards.items()}
    rewards = {name: given[1] if isinstance(given, tuple) else given for name, given in rewards.items()}
    returned: dict[str, Any] = {}
    for name, fn in fns.items():  # plain functions in order; async ones gathered after
        if not is_async(fn):
            args, kwargs = call_args(name, fn, inputs, log)
            returned[name] = _call(lambda fn=fn, args=args, kwargs=kwargs: fn(*args, **kwargs))
    pending = [(name, fn) for name, fn in fns.items() if is_async(fn)]
    results = run_concurrently([lambda fn=fn, name=name: _await(name, fn, inputs, log) for name, fn in pending])
    returned.update((name, result) for (name, _), result in zip(pending, results, strict=True))
    for column, logged in log.extra.items():  # a short column would shift the completion table's rows
        if len(logged) != n:
            raise RewardError(
                f"log_extra({column!r}, ...) logged {len(logged)} values for {n} completions (rewards: "
                f"{', '.join(rewards)}); log_extra takes one value per completion: the column of the completion table"
            )
    total = torch.zeros(n)
    failed = torch.zeros(n, dtype=torch.bool)
    parts: dict[str, torch.Tensor] = {}
    for name, weight in rewards.items():
        vals, bad, why = _values(name, returned[name], n, on_error, completions, metadata)
        if bad:
            _warn_failed(name, why, len(bad), n, on_error)
        vals[bad] = 0.0 if on_error == "zero" else math.nan
        failed[bad] = True
        parts[name] = vals
        total += float(weight) * vals.nan_to_num(nan=0.0)
    unscorable = torch.stack(list(parts.values())).isnan().all(dim=0)
    total[unscorable] = math.nan  # TRL: a row no function applies to has no reward (left out, advantage 0)
    if unscorable.any():
        _warn_unscorable(unscorable, completions, metadata, list(rewards))
    return RewardScores(total, parts, failed, log)


def _values(
    name: str, result: Any, n: int, on_error: str, completions: list[str], metadata: list[dict]
) -> tuple[torch.Tensor, list[int], str]:
    """(the (N,) values, None and NaN as NaN; the rows that failed; why) of what reward ``name`` gave: an exception
    fails every row, an infinite value its row; a RewardError for either under ``on_error="raise"``."""
    if isinstance(result, BaseException):
        cause = failure_cause(result)  # the fix, where the error's own message does not say it
        if on_error == "raise":
            raise RewardError(
                f"reward {name!r} raised {type(result).__name__}: {result}"
                + (
                    cause
                    or " (set rewards.on_error: skip to leave a raising reward out of the rows it raised for, "
                    "with a warning each time)"
                )
            ) from result
        return torch.full((n,), math.nan), list(range(n)), f"raised {type(result).__name__}: {result}{cause}"
    values = reward_values(name, result, n)  # a RewardError unless n numbers or Nones
    vals = torch.tensor([v if v is not None else math.nan for v in values])
    bad = vals.isinf().nonzero().flatten().tolist()
    if bad and on_error == "raise":
        i = bad[0]
        raise RewardError(
            f"reward {name!r} returned {values[i]!r} for sample {i} (completion {completions[i][:80]!r}, metadata "
            f"{metadata[i]}); rewards must be finite numbers, or None for a row the function does not apply to. "
            "Set rewards.on_error: skip (leave it out) or zero to go on, warned (--model.rewards.on_error skip)."
        )
    return vals, bad, f"returned {values[bad[0]]!r}" if bad else ""


def _warn_failed(name: str, why: str, count: int, n: int, on_error: str) -> None:
    """The warning of ``count`` of ``n`` failed values of reward ``name``, with this process's running count."""
    FAILURES[name] += count
    done = "left out of their rewards" if on_error == "skip" else "scored 0"
    warnings.warn(
        f"[infgrpo] reward {name!r} {why} for {count} of {n} completions: rewards.on_error={on_error} {done} "
        f"({FAILURES[name]} failed values of {name!r} so far); set rewards.on_error: raise to stop at the failure",
        InfgrpoWarning,
        stacklevel=3,
    )


def _warn_unscorable(rows: torch.Tensor, completions: list[str], metadata: list[dict], names: list[str]) -> None:
    """The warning of the completions (``rows``, bool (N,)) that no reward applies to, naming the first, with this
    process's running count (TRL logs one for such a row)."""
    count, first = int(rows.sum()), int(rows.nonzero()[0])
    UNSCORED["completions"] += count
    warnings.warn(
        f"[infgrpo] no reward for {count} of {len(completions)} completions: every reward function "
        f"({', '.join(names)}) returned None (or failed) for them (first: completion {completions[first][:60]!r} "
        f"of the row {abbreviated(dict(metadata[first]), 120)}); as TRL does, their reward is NaN, left out of "
        f"their group's mean and std, and their advantage is 0 ({UNSCORED['completions']} such completions so "
        "far). Give every row a reward that applies to it",
        InfgrpoWarning,
        stacklevel=3,
    )


def _call(call: Callable[[], Any]) -> Any:
    """What ``call`` returned, or the exception it raised (a RewardError is raised on)."""
    try:
        return call()
    except RewardError:
        raise
    except Exception as err:  # noqa: BLE001 - user code: any failure is the function's
        return err


async def _await(name: str, fn: RewardFn, inputs: RewardInputs, log: RewardLog) -> Any:
    """The awaited value of async ``fn``'s call."""
    args, kwargs = call_args(name, fn, inputs, log)
    return await fn(*args, **kwargs)


def compute_rewards(
    rewards: dict[str, float], completions: list[str], metadata: list[dict], *args: Any, **kwargs: Any
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(total (N,), {name: values (N,)}) of :func:`score_rewards` called with the same arguments (``on_error``,
    ``completion_lengths``, ``max_completion_length``, ``prompts``, ``completion_ids``, ``trainer_state``): the
    short form for trying rewards by hand."""
    scores = score_rewards(rewards, completions, metadata, *args, **kwargs)
    return scores.total, scores.parts
