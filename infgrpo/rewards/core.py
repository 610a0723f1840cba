"""The reward registry and the weighted, validated computation of rewards.

A reward function has the signature::

    def my_reward(completions: list[str], metadata: list[dict], **info) -> list[float]: ...

``completions[i]`` is the decoded text of completion i (stop token removed) and ``metadata[i]`` the
dataset row of its prompt (e.g. ``{"answer": "42"}``). ``**info`` is optional: a function that
takes ``**info`` receives ``completion_lengths`` (tokens, list[int]) and ``max_completion_length``;
one that names either of them as a parameter receives the ones it names.
Select built-ins by name or any importable callable as ``"package.module:function"``.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Sequence

import torch

from infgrpo.registry import Registry

RewardFn = Callable[[list[str], list[dict]], Sequence[float]]
REWARDS = Registry("rewards")


class RewardError(ValueError):
    """A reward function raised, returned the wrong count, or returned a non-finite value."""


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
    if name in REWARDS:
        return REWARDS.get(name)
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise ValueError(f"rewards: cannot import {name!r} ({err})") from err
        if not callable(fn):
            raise ValueError(f"rewards: {name!r} is not callable")
        return fn
    raise ValueError(
        f"rewards: {name!r} is not known; valid: {', '.join(REWARDS.names())} or an importable 'module.path:function'"
    )


def check_rewards(rewards: dict[str, float]) -> dict[str, float]:
    """Validates a ``{name: weight}`` mapping at config time."""
    if not rewards:
        raise ValueError("rewards: at least one reward function is needed, e.g. {'synthetic': 1.0}")
    for name, weight in rewards.items():
        resolve_reward(name)
        if not math.isfinite(float(weight)):
            raise ValueError(f"rewards[{name!r}]={weight!r} must be a finite number")
    return rewards


def compute_rewards(
    rewards: dict[str, float],
    completions: list[str],
    metadata: list[dict],
    on_error: str = "raise",
    completion_lengths: list[int] | None = None,
    max_completion_length: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weighted sum of the reward functions -> (N,) float32, and each function's raw (N,) values.

    ``on_error="raise"`` turns a failing function or a NaN/inf value into a :class:`RewardError`
    naming the function and the sample; ``"zero"`` scores such samples 0 instead.
    """
    if on_error not in ("raise", "zero"):
        raise ValueError(f"reward_on_error={on_error!r}; valid: 'raise', 'zero'")
    n = len(completions)
    total = torch.zeros(n)
    parts: dict[str, torch.Tensor] = {}
    for name, weight in rewards.items():
        fn = resolve_reward(name)
        info = {"completion_lengths": completion_lengths, "max_completion_length": max_completion_length}
        try:
            values = list(fn(completions, metadata, **info_for(fn, info)))
        except Exception as err:
            if on_error == "zero":
                values = [0.0] * n
            else:
                raise RewardError(f"reward {name!r} raised {type(err).__name__}: {err}") from err
        if len(values) != n:
            raise RewardError(f"reward {name!r} returned {len(values)} values for {n} completions")
        vals = torch.tensor([float(v) if v is not None else math.nan for v in values])
        bad = (~torch.isfinite(vals)).nonzero().flatten().tolist()
        if bad and on_error == "raise":
            i = bad[0]
            raise RewardError(
                f"reward {name!r} returned {values[i]!r} for sample {i} (completion "
                f"{completions[i][:80]!r}, metadata {metadata[i]}); rewards must be finite numbers. "
                "Set reward_on_error: zero to score such samples 0."
            )
        vals[bad] = 0.0
        parts[name] = vals
        total += float(weight) * vals
    return total, parts
