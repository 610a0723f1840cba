"""A reward function's signature checked against the call it will get, when the settings are built.

    check_reward_call("my_pkg.rewards:score", score)   # ConfigError unless TRL's call (or 0.2's) can bind
    needed_columns(accuracy_reward)                     # ["solution"]: checked against the data's columns

Rewards are called in TRL's convention, by keyword (:mod:`infgrpo.rewards.calls`); a function whose second
parameter is ``metadata`` gets infgrpo 0.2's ``fn(completions, metadata, **info)``. A function that can take
neither (positional-only parameters, ``*args`` and nothing else) would fail at the first step, after the model
loaded and the first rollout decoded; binding the signature finds it before anything loads. The dataset columns a
TRL-convention function needs (its required parameters that TRL's call does not pass otherwise) are checked
against the data's first rows by the command line, before the model loads
(:func:`~infgrpo.training.preflight.model_data.check_before_loading`), and against every row when fit starts.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from infgrpo.rewards.calls import INFO_KEYS, PASSED, named_only, needed_columns, takes_metadata
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
            offered = dict.fromkeys([*PASSED, *INFO_KEYS, *needed_columns(fn)])
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
