"""Where a reward named in ``rewards.functions`` comes from, besides the registry: code, a factory call, a model.

    resolve_source("mylib.rewards:score", REWARDS)                                         # an importable callable
    resolve_source("trl.rewards:get_soft_overlong_punishment(max_completion_len=256, soft_punish_cache=64)", REWARDS)
    resolve_source("runs/reward-model", REWARDS)            # a sequence-classification model: folder or hub id

A factory call is written as Python with literal keyword or positional arguments (numbers, strings, lists,
dicts, True/False/None), so a YAML file can hold it; it is called once per process and its result kept, as is a
reward model (loaded once; :class:`~infgrpo.rewards.reward_model.RewardModel`). Each error names
``rewards.functions``, the key and what is valid.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from infgrpo.registry import Registry
from infgrpo.settings import ConfigError

_MADE: dict[str, Callable[..., Any]] = {}  # a factory call's or a reward model's key -> the reward it made


def factory_call(name: str) -> tuple[str, list[Any], dict[str, Any]] | None:
    """(``module:function``, positional, keyword arguments) of ``"module:function(...)"``; None when ``name`` is
    no call; a ConfigError naming the key when its arguments are not literals."""
    if not name.endswith(")") or "(" not in name:
        return None
    target, _, rest = name.partition("(")
    try:
        call = ast.parse(f"f({rest}", mode="eval").body
        assert isinstance(call, ast.Call)
        args = [ast.literal_eval(a) for a in call.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg is not None}
    except (SyntaxError, ValueError, AssertionError) as err:
        raise ConfigError(
            f"rewards.functions: {name!r} is not a factory call with literal arguments, e.g. "
            "'trl.rewards:get_soft_overlong_punishment(max_completion_len=256, soft_punish_cache=64)' "
            f"({type(err).__name__})"
        ) from err
    return target.strip(), args, kwargs


def is_model_source(name: str, registry: Registry) -> bool:
    """Whether ``name`` stands for a reward model (read from its ``config.json`` only; nothing is loaded)."""
    if name in registry or ":" in name or name in _MADE and not hasattr(_MADE[name], "to"):
        return False
    from infgrpo.rewards.reward_model import is_reward_model

    return is_reward_model(name)


def resolve_source(name: str, registry: Registry) -> Callable[..., Any]:
    """The reward ``name`` stands for when it is not a registered name (see the module docstring)."""
    if name in _MADE:
        return _MADE[name]
    call = factory_call(name)
    if call is not None:
        target, args, kwargs = call
        factory = registry.resolve(target)
        try:
            made = factory(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - user code: its message says what is wrong
            raise ConfigError(f"rewards.functions: {name!r} raised {type(err).__name__}: {err}") from err
        if not callable(made):
            raise ConfigError(f"rewards.functions: {name!r} returned a {type(made).__name__}, not a reward function")
        _MADE[name] = made
        return made
    if ":" not in name and name not in registry:
        from infgrpo.rewards.reward_model import RewardModel, is_reward_model, not_a_reward_model

        if is_reward_model(name):
            _MADE[name] = RewardModel(name)
            return _MADE[name]
        problem = not_a_reward_model(name)  # a folder or hub id that is no reward model: never "is not known"
        if problem:
            raise ConfigError(f"{registry.field}: {problem}")
    return registry.resolve(name)
