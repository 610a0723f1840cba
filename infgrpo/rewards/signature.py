"""A reward function's signature checked against the call it will get, when the settings are built.

    check_reward_call("my_pkg.rewards:score", score)   # ConfigError unless score(completions, metadata, ...) binds

Rewards are called as ``fn(completions, metadata, **info)`` (:func:`~infgrpo.rewards.core.score_rewards`:
``info`` holds ``completion_lengths`` and ``max_completion_length``, passed when the function takes ``**info``
or names them). A function that cannot take that call (one parameter, a required third one, keyword-only
ones) would fail at the first step, after the model loaded and the first rollout decoded; binding the
signature finds it before anything loads.
"""

from __future__ import annotations

import inspect
from typing import Any

from infgrpo.rewards.core import INFO_KEYS, info_for
from infgrpo.settings import ConfigError

EXPECTED = "fn(completions: list[str], metadata: list[dict], **info) -> list[float]"


def check_reward_call(name: str, fn: Any) -> None:
    """Raises a ConfigError naming ``functions[name]`` when ``fn`` cannot be called the way rewards are."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable without a signature: nothing to check
        return
    info = info_for(fn, dict.fromkeys(INFO_KEYS))
    try:
        signature.bind([], [], **info)
    except TypeError as err:
        raise ConfigError(
            f"functions[{name!r}] has the signature {signature}, which cannot take the call rewards get "
            f"({err}); a reward must accept {EXPECTED} (info: {', '.join(INFO_KEYS)}, passed when named or with "
            "**info)"
        ) from err
