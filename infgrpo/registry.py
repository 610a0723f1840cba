"""A tiny name -> callable registry, so algorithms are chosen by name from YAML.

LOSSES = Registry("loss_type")

@LOSSES.register("grpo")
def grpo_loss(...): ...

LOSSES.get("grpo")      # unknown names raise a ValueError naming the field and valid names

Fixed sets of choices (not extensible by users) are ``Literal`` aliases declared next to their
implementation; :func:`choices` reads them and :func:`check_choice` validates a value against them,
so a type hint, ``--help`` and the error message list the same names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, get_args

from infgrpo.settings import ConfigError


class Registry:
    """Maps names to callables; ``field`` is the config field the name comes from (for errors)."""

    def __init__(self, field: str) -> None:
        self.field = field
        self._items: dict[str, Callable[..., Any]] = {}

    def register(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: registers the function under ``name`` (each name once)."""

        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            if name in self._items:
                raise ValueError(f"{self.field}: {name!r} is already registered")
            self._items[name] = fn
            return fn

        return deco

    def replace(self, name: str, fn: Callable[..., Any]) -> None:
        """Registers ``fn`` as ``name``, replacing what was registered under it (user code registered in Python)."""
        self._items[name] = fn

    def get(self, name: str) -> Callable[..., Any]:
        """The callable registered as ``name``; a ValueError naming the field and valid names otherwise."""
        if name not in self._items:
            raise ConfigError(f"{self.field}={name!r} is not known; valid: {', '.join(self.names())}")
        return self._items[name]

    def check(self, name: str) -> str:
        """Validates ``name`` early (config time) and returns it."""
        self.get(name)
        return name

    def resolve(self, name: str) -> Callable[..., Any]:
        """A registered name, or ``module.path:function`` of any importable callable (user code: rewards, criteria);
        a ConfigError naming the field, the value and what is valid otherwise."""
        if name in self._items:
            return self._items[name]
        if ":" in name:
            module, _, attr = name.partition(":")
            try:
                fn = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as err:
                raise ConfigError(f"{self.field}: cannot import {name!r} ({err})") from err
            if not callable(fn):
                raise ConfigError(f"{self.field}: {name!r} is not callable")
            return fn
        raise ConfigError(
            f"{self.field}: {name!r} is not known; valid: {', '.join(self.names())} or an importable "
            "'module.path:function'"
        )

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def choices(literal: Any) -> tuple[str, ...]:
    """The names of a ``Literal[...]`` alias, in declaration order."""
    return tuple(get_args(literal))


def check_choice(field: str, value: object, valid: Iterable[str]) -> Any:
    """``value`` when it is one of ``valid``; else a ValueError naming ``field``, the value and the valid names."""
    valid = tuple(valid)
    if value not in valid:
        raise ConfigError(f"{field}={value!r} is not known; valid: {', '.join(map(str, valid))}")
    return value
