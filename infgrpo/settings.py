"""Settings groups: typed dataclasses, checked where they are built, errors that name the dotted key.

Every group of ``GRPOModule`` (``PolicyConfig``, ``SamplerConfig``, ``Objective``, ``UpdateConfig``, ...) calls
:func:`check_types` first in its ``__post_init__`` and then checks its ranges and combinations, raising
:class:`ConfigError` (a ``ValueError``) whose message starts with the field: ``temperature='1.0' must be a
number``. :func:`build_group` makes a group from a mapping or copies an instance and puts the group's key in
front (``sampler.temperature=...``); the command line puts ``model.`` in front of that. :func:`config_paths`
names the config files a command line gives (``-c`` / ``--config``), for the checks that read them before parsing.
Every warning infgrpo issues is an :class:`InfgrpoWarning` (a ``UserWarning``), defined here with the error.

    check_types(config)                          # TypeError-free: ConfigError naming the field and its type
    build_group(SamplerConfig, {"top_p": 2}, "sampler")   # ConfigError: sampler.top_p=2 must be in (0, 1]
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import types
import typing
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

T = TypeVar("T")


class ConfigError(ValueError):
    """An invalid setting; the message starts with its (dotted) key, the value, and says what is valid."""


class InfgrpoWarning(UserWarning):
    """The category of every warning infgrpo issues (``[infgrpo] ...``): a setting that is off or has no effect, a
    retry after running out of memory, a run that looks collapsed. A ``UserWarning``, so filters on that still apply;
    ``warnings.filterwarnings("ignore", category=InfgrpoWarning)`` silences infgrpo's alone, and the test suite
    turns them into errors unless a test expects them."""


class InfgrpoFutureWarning(InfgrpoWarning, FutureWarning):
    """Something infgrpo still serves but will remove, the version named in the message; shown by default, as
    Python's ``FutureWarning`` is, and caught by filters on either class."""


@contextlib.contextmanager
def prefixed(key: str) -> Iterator[None]:
    """Re-raises a ValueError or TypeError from the block as a :class:`ConfigError` with ``key.`` in front."""
    try:
        yield
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{key}.{err}") from err


def resolve_auto(
    setting: str, reason: Callable[[], str | None], refuse: Callable[[str], Exception], warning: str, stacklevel: int
) -> bool:
    """Whether an 'auto' / 'on' / 'off' switch is on: 'off' is off; 'on' and 'auto' are on where ``reason()`` (why
    the feature would not be exact, one line) is None. Otherwise 'on' raises ``refuse(reason)``, and 'auto' is off
    and warns ``[infgrpo] {warning}: off, because {reason}`` (``warning`` empty: silently), ``stacklevel`` counted
    from the caller of this function."""
    if setting == "off":
        return False
    why = reason()
    if why is None:
        return True
    if setting == "on":
        raise refuse(why)
    if warning:
        warnings.warn(f"[infgrpo] {warning}: off, because {why}", InfgrpoWarning, stacklevel=stacklevel + 1)
    return False


def build_group(cls: type[T], value: Any, key: str) -> T:
    """A checked ``cls`` from ``value``: an instance (copied), a mapping of its fields, or None (the defaults).

    Errors (unknown fields, wrong types, bad values) are :class:`ConfigError` naming ``key.<field>``.
    """
    if value is None:
        value = {}
    if isinstance(value, cls):
        return dataclasses.replace(value)
    if hasattr(value, "as_dict") and not isinstance(value, Mapping):  # a jsonargparse Namespace
        value = value.as_dict()
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}={value!r} must be a {cls.__name__} or a mapping of its fields")
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = [k for k in value if k not in names]
    if unknown:
        raise ConfigError(f"{key}.{unknown[0]} is not a setting of {key}; valid: {', '.join(names)}")
    with prefixed(key):
        return cls(**value)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def check_types(obj: Any) -> None:
    """Raises a :class:`ConfigError` naming the first field of the dataclass ``obj`` whose value does not match
    its annotation (ints pass for floats, bools for neither; ``Literal`` fields list their choices)."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        hint, value = hints.get(f.name, Any), getattr(obj, f.name)
        if not matches(value, hint):
            raise ConfigError(type_error(f.name, value, hint))


def check_arguments(func: Any, values: Mapping[str, Any], prefix: str = "") -> None:
    """Raises a :class:`ConfigError` naming ``prefix + name`` for the first of ``values`` (a function's arguments
    by name) that does not match its annotation in ``func``'s signature."""
    hints = typing.get_type_hints(func)
    for name, value in values.items():
        if name in hints and not matches(value, hints[name]):
            raise ConfigError(type_error(prefix + name, value, hints[name]))


def type_error(field: str, value: Any, hint: Any) -> str:
    """The message for ``field=value`` not matching ``hint``, in the form of :func:`infgrpo.registry.check_choice`
    for a choice of names."""
    literal = _literal_values(hint)
    if literal is not None and all(isinstance(v, str) for v in literal):
        return f"{field}={value!r} is not known; valid: {', '.join(literal)}"
    return f"{field}={value!r} must be {describe(hint)}"


def _literal_values(hint: Any) -> tuple | None:
    """The values of a ``Literal`` hint, else None."""
    return get_args(hint) if get_origin(hint) is Literal else None


def _union_args(hint: Any) -> tuple | None:
    origin = get_origin(hint)
    return get_args(hint) if origin is Union or origin is types.UnionType else None


def matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the type ``hint`` (the subset of typing the settings use)."""
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    union = _union_args(hint)
    if union is not None:
        return any(matches(value, h) for h in union)
    literal = _literal_values(hint)
    if literal is not None:
        return any(value == v and type(value) is type(v) for v in literal)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    origin, args = get_origin(hint), get_args(hint)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            return False
        inner = args[0] if args else Any
        return all(matches(v, inner) for v in value)
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            return False
        key_t, val_t = args if len(args) == 2 else (Any, Any)
        return all(matches(k, key_t) and matches(v, val_t) for k, v in value.items())
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def describe(hint: Any) -> str:
    """``hint`` in words: ``an integer or 'auto'``, ``a number or null``, ``a list of integers``."""
    if hint is None or hint is type(None):
        return "null"
    union = _union_args(hint)
    if union is not None:
        return " or ".join(describe(h) for h in union)
    literal = _literal_values(hint)
    if literal is not None:
        return " or ".join(repr(v) for v in literal)
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    origin, args = get_origin(hint), get_args(hint)
    if origin in (list, tuple):
        return f"a list of {_plural(args[0]) if args else 'values'}"
    if origin in (dict, Mapping):
        return f"a mapping of {_plural(args[0])} to {_plural(args[1])}" if len(args) == 2 else "a mapping"
    return getattr(hint, "__name__", str(hint))


def _plural(hint: Any) -> str:
    plural = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}
    return plural.get(hint, describe(hint))


def config_paths(argv: list[str]) -> list[str]:
    """The values of ``-c`` / ``--config`` in ``argv`` (``--config=path`` or ``--config path``), in order."""
    paths = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in ("-c", "--config"):
            paths.append(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    return paths
