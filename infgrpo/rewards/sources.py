"""Where a reward named in ``rewards.functions`` comes from, besides the registry: code, a factory call, a model.

    resolve_source("mylib.rewards:score", REWARDS)                                         # an importable callable
    resolve_source("trl.rewards:get_soft_overlong_punishment(max_completion_len=256, soft_punish_cache=64)", REWARDS)
    resolve_source("partial(open_r1.rewards:code_reward, num_parallel=2, provider_type='e2b')", REWARDS)
    resolve_source("runs/reward-model", REWARDS)            # a sequence-classification model: folder or hub id

A factory call is written as Python with literal keyword or positional arguments (numbers, strings, lists,
dicts, True/False/None), so a YAML file can hold it; it is called once per process and its result kept, as is a
reward model (loaded once; :class:`~infgrpo.rewards.reward_model.RewardModel`).

``partial(module:function, key=literal, ...)`` is the reward function itself with keyword arguments bound, as
``functools.partial`` binds them (the recipes' registries bind their service rewards' arguments so): the function
is imported, never called here; each call of the reward is a call of the function with those arguments and TRL's
keywords. A keyword the function does not take is refused when the settings are built. Each error names
``rewards.functions``, the key and what is valid.
"""

from __future__ import annotations

import ast
import functools
import inspect
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


def partial_call(name: str) -> tuple[str, dict[str, Any]] | None:
    """(``module:function``, the keyword arguments to bind) of ``"partial(module:function, key=literal, ...)"``;
    None when ``name`` is no such form; a ConfigError naming the key when it binds anything but literal keywords."""
    if not (name.startswith("partial(") and name.endswith(")")):
        return None
    target, _, rest = name[len("partial(") : -1].partition(",")
    example = "e.g. 'partial(open_r1.rewards:code_reward, num_parallel=2, provider_type=\"e2b\")'"
    try:
        call = ast.parse(f"f({rest})", mode="eval").body
        assert isinstance(call, ast.Call)
        if call.args or any(k.arg is None for k in call.keywords):
            raise ValueError("only keyword arguments are bound")
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg is not None}
    except (SyntaxError, ValueError, AssertionError) as err:
        raise ConfigError(
            f"rewards.functions: {name!r} is no partial(module:function, key=literal, ...) with literal keyword "
            f"arguments, {example} ({type(err).__name__}: {err})"
        ) from err
    if ":" not in target:
        raise ConfigError(
            f"rewards.functions: {name!r} binds {target.strip()!r}, which is no module:function; {example}"
        )
    return target.strip(), kwargs


def bound(name: str, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Callable[..., Any]:
    """``fn`` with ``kwargs`` bound (``functools.partial``, ``fn``'s name and docstring kept); a ConfigError naming
    the key when ``fn`` takes no such keyword."""
    try:
        inspect.signature(fn).bind_partial(**kwargs)
    except TypeError as err:
        raise ConfigError(f"rewards.functions: {name!r}: {err} (its signature: {inspect.signature(fn)})") from err
    except ValueError:  # no readable signature: bound as given
        pass
    return functools.update_wrapper(functools.partial(fn, **kwargs), fn)


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
    binding = partial_call(name)
    if binding is not None:
        target, kwargs = binding
        _MADE[name] = bound(name, registry.resolve(target), kwargs)
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
