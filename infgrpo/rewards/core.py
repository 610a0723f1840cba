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

A reward *fails* for a sample when its function raises (all its samples fail), returns None, NaN or
inf (``None`` per row is the contract's failed value; anything but a sequence of numbers and Nones, one per
completion, is a bug of the function: a :class:`RewardError` in every mode, see :mod:`infgrpo.rewards.returns`).
``rewards.on_error`` says what a failure then does:

- ``raise`` (default): stop with a :class:`RewardError` naming the function and the sample;
- ``zero``: score the failed value 0; the 0 enters its group's mean and std like any reward (so a
  failed row of rewards [1, fail, 0, 1] gets advantage -0.87: it is pushed down);
- ``skip``: TRL 1.16's semantics: a failed value is NaN and the weighted sum leaves it out (NaN-sum);
  a completion whose every reward failed is *unscorable*: its reward stays NaN, it is left out of its
  group's mean and std and of the logged reward, and its advantage is 0 (rewards [1, fail, 0, 1]
  give advantages [0.58, 0, -1.15, 0.58]).

In every mode the completions with a failed reward are counted in ``train/rewards_failed``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from infgrpo.registry import Registry, check_choice, choices
from infgrpo.rewards.async_calls import run_concurrently
from infgrpo.rewards.calls import RewardInputs, RewardLog, TrainerState, call_args, is_async
from infgrpo.rewards.returns import RewardError, reward_values
from infgrpo.rewards.sources import resolve_source

RewardFn = Callable[..., Sequence[float | None]]
REWARDS = Registry("rewards")
OnError = Literal["raise", "zero", "skip"]
"""What a failed reward does (``rewards.on_error``; see the module docstring)."""


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
    options, e.g. ``tokenizer=``). Registering a name again replaces it. Returns ``name``."""
    import torch.nn as nn

    if isinstance(fn, nn.Module):
        from infgrpo.rewards.reward_model import RewardModel

        fn = RewardModel(fn, **reward_model)
    elif not callable(fn):
        raise TypeError(f"register_reward({name!r}, ...) needs a callable or a model; got {type(fn).__name__}")
    REWARDS.replace(name, fn)
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
    """(N,) float32 weighted sum; NaN where every function failed under ``on_error="skip"``."""
    parts: dict[str, torch.Tensor]
    """Each reward function's raw (N,) values (NaN where it failed under ``skip``, 0 under ``zero``)."""
    failed: torch.Tensor
    """(N,) bool: the completions for which at least one reward failed."""
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
    rewards: dict[str, float],
    completions: list[str],
    metadata: list[dict],
    on_error: str = "raise",
    completion_lengths: list[int] | None = None,
    max_completion_length: int | None = None,
    *,
    prompts: list[Any] | None = None,
    completion_ids: list[list[int]] | None = None,
    trainer_state: TrainerState | None = None,
) -> RewardScores:
    """Weighted sum of the reward functions over ``completions``, with each function's values and the failures.

    ``metadata[i]`` is completion i's dataset row (its columns reach TRL-convention functions by name),
    ``prompts[i]`` its prompt as the dataset gave it (default: the row's ``prompt``). ``on_error="raise"`` turns
    a failing function or a None/NaN/inf value into a :class:`RewardError` naming the function and the sample;
    ``"zero"`` scores such values 0; ``"skip"`` keeps them NaN in the function's values, sums the others (NaN-sum)
    and leaves the total NaN where every function failed (TRL 1.16; see the module docstring). ``async``
    functions run concurrently, after the others.
    """
    check_on_error(on_error)
    inputs = RewardInputs(
        completions, metadata, prompts, completion_ids, completion_lengths, max_completion_length, trainer_state
    )
    n, log = len(completions), RewardLog()
    fns = {name: resolve_reward(name) for name in rewards}
    returned: dict[str, Any] = {}
    for name, fn in fns.items():  # plain functions in order; async ones gathered after
        if not is_async(fn):
            args, kwargs = call_args(name, fn, inputs, log)
            returned[name] = _call(name, lambda fn=fn, args=args, kwargs=kwargs: fn(*args, **kwargs), on_error, n)
    pending = [(name, fn) for name, fn in fns.items() if is_async(fn)]
    results = run_concurrently([lambda fn=fn, name=name: _await(name, fn, inputs, log) for name, fn in pending])
    for (name, _), result in zip(pending, results, strict=True):
        returned[name] = _outcome(name, result, on_error, n)
    total = torch.zeros(n)
    failed = torch.zeros(n, dtype=torch.bool)
    parts: dict[str, torch.Tensor] = {}
    for name, weight in rewards.items():
        values = reward_values(name, returned[name], n)  # a RewardError unless n numbers or Nones
        vals = torch.tensor([v if v is not None else math.nan for v in values])
        bad = (~torch.isfinite(vals)).nonzero().flatten().tolist()
        if bad and on_error == "raise":
            i = bad[0]
            raise RewardError(
                f"reward {name!r} returned {values[i]!r} for sample {i} (completion "
                f"{completions[i][:80]!r}, metadata {metadata[i]}); rewards must be finite numbers. "
                "Set rewards.on_error: skip (TRL's handling) or zero to go on (--model.rewards.on_error skip)."
            )
        vals[bad] = 0.0 if on_error == "zero" else math.nan
        failed[bad] = True
        parts[name] = vals
        total += float(weight) * vals.nan_to_num(nan=0.0)
    if on_error == "skip":
        total[torch.stack(list(parts.values())).isnan().all(dim=0)] = math.nan  # unscorable rows
    return RewardScores(total, parts, failed, log)


def _call(name: str, call: Callable[[], Any], on_error: str, n: int) -> Any:
    """What ``call`` returned; a RewardError when it raised and ``on_error`` is raise, else n failed values."""
    try:
        return call()
    except RewardError:
        raise
    except Exception as err:  # noqa: BLE001 - user code: any failure is the function's
        return _outcome(name, err, on_error, n)


async def _await(name: str, fn: RewardFn, inputs: RewardInputs, log: RewardLog) -> Any:
    """The awaited value of async ``fn``'s call."""
    args, kwargs = call_args(name, fn, inputs, log)
    return await fn(*args, **kwargs)


def _outcome(name: str, result: Any, on_error: str, n: int) -> Any:
    """``result``, or for an exception a RewardError (``raise``) or n failed values (None each)."""
    if isinstance(result, BaseException):
        if on_error == "raise":
            raise RewardError(f"reward {name!r} raised {type(result).__name__}: {result}") from result
        return [None] * n
    return result


def compute_rewards(
    rewards: dict[str, float], completions: list[str], metadata: list[dict], *args: Any, **kwargs: Any
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(total (N,), {name: values (N,)}) of :func:`score_rewards` called with the same arguments (``on_error``,
    ``completion_lengths``, ``max_completion_length``, ``prompts``, ``completion_ids``, ``trainer_state``): the
    short form for trying rewards by hand."""
    scores = score_rewards(rewards, completions, metadata, *args, **kwargs)
    return scores.total, scores.parts
