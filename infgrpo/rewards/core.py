"""The reward registry and the weighted, validated computation of rewards.

A reward function has the signature::

    def my_reward(completions: list[str], metadata: list[dict], **info) -> list[float]: ...

``completions[i]`` is the decoded text of completion i (stop token removed) and ``metadata[i]`` the
dataset row of its prompt (e.g. ``{"answer": "42"}``). ``**info`` is optional: a function that
takes ``**info`` receives ``completion_lengths`` (tokens, list[int]) and ``max_completion_length``;
one that names either of them as a parameter receives the ones it names.
Select built-ins by name or any importable callable as ``"package.module:function"``.

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

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from infgrpo.registry import Registry, check_choice, choices
from infgrpo.rewards.returns import RewardError, reward_values

RewardFn = Callable[[list[str], list[dict]], Sequence[float]]
REWARDS = Registry("rewards")
OnError = Literal["raise", "zero", "skip"]
"""What a failed reward does (``rewards.on_error``; see the module docstring)."""


def check_on_error(on_error: str, field: str = "reward_on_error") -> str:
    """Validates ``on_error`` (raise, zero or skip) and returns it."""
    return check_choice(field, on_error, choices(OnError))


INFO_KEYS = ("completion_lengths", "max_completion_length")


def info_for(fn: RewardFn, info: dict) -> dict:
    """The entries of ``info`` that ``fn`` takes: all with ``**info``, else those it names."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return info
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in info.items() if k in named}


def resolve_reward(name: str) -> RewardFn:
    """A registered name, or ``"module.path:function"`` of any importable callable."""
    return REWARDS.resolve(name)


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
) -> RewardScores:
    """Weighted sum of the reward functions over ``completions``, with each function's values and the failures.

    ``on_error="raise"`` turns a failing function or a None/NaN/inf value into a :class:`RewardError`
    naming the function and the sample; ``"zero"`` scores such values 0; ``"skip"`` keeps them NaN in
    the function's values, sums the others (NaN-sum) and leaves the total NaN where every function
    failed (TRL 1.16; see the module docstring).
    """
    check_on_error(on_error)
    n = len(completions)
    total = torch.zeros(n)
    failed = torch.zeros(n, dtype=torch.bool)
    parts: dict[str, torch.Tensor] = {}
    for name, weight in rewards.items():
        fn = resolve_reward(name)
        info = {"completion_lengths": completion_lengths, "max_completion_length": max_completion_length}
        try:
            returned = fn(completions, metadata, **info_for(fn, info))
        except Exception as err:
            if on_error == "raise":
                raise RewardError(f"reward {name!r} raised {type(err).__name__}: {err}") from err
            returned = [None] * n
        values = reward_values(name, returned, n)  # a RewardError unless n numbers or Nones
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
    return RewardScores(total, parts, failed)


def compute_rewards(
    rewards: dict[str, float],
    completions: list[str],
    metadata: list[dict],
    on_error: str = "raise",
    completion_lengths: list[int] | None = None,
    max_completion_length: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(total (N,), {name: values (N,)}) of :func:`score_rewards`: the short form for trying rewards by hand."""
    scores = score_rewards(rewards, completions, metadata, on_error, completion_lengths, max_completion_length)
    return scores.total, scores.parts
