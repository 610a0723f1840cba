"""Tools: import paths to callables, their JSON schemas, environments' factories and tool methods, tool boxes.

    add = load_tool("my_tools:add", "tools")          # ConfigError naming agent.tools when it does not import
    schema = tool_schema(add, "my_tools:add")          # transformers' get_json_schema; one line when it cannot
    load_factories("my_env:Wordle")                    # {None: Wordle}: imported, reset and every method checked
    environment_tools(Wordle)                          # ['guess']: TRL's rule for an environment's methods
    box = tool_box([add, env.guess], schemas)          # name -> callable, sync and async apart

A tool is a plain function (sync or ``async def``) with type hints and a Google-style docstring with an ``Args:``
line per parameter, as TRL 1.16 takes it: the schema the chat template renders is transformers'
``get_json_schema`` of it. TRL builds the schemas at its first batch; we build them when the settings are read, so
a missing hint or docstring is one line before any model loads.

An environment's tools are the plain functions of its class (``inspect.getmembers(cls, inspect.isfunction)``:
inherited ones and staticmethods included, classmethods and properties not), in alphabetical order, minus
``reset``, ``get_reward`` and names starting with ``_`` (TRL's rule, read on the class so properties are not
evaluated).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from transformers.utils import get_json_schema

from infgrpo.registry import Registry
from infgrpo.settings import ConfigError

Factory = Callable[[], Any]
"""Makes one environment instance: a class, or any callable taking no arguments."""

NOT_TOOLS = ("reset", "get_reward")
"""An environment's functions that are no tools: its reset and its reward (TRL's rule)."""


def load_tool(path: str, field_name: str) -> Callable[..., Any]:
    """The callable ``path`` (``"module.path:function"``) names; a ConfigError naming ``field_name``, the path and
    what is valid when it is no such path, does not import or is not callable."""
    if not isinstance(path, str) or ":" not in path:
        raise ConfigError(f"{field_name}: {path!r} is not an import path; write 'module.path:function'")
    return Registry(field_name).resolve(path)  # the import rewards use: one message for a path that fails


def tool_schema(tool: Callable[..., Any], name: str) -> dict[str, Any]:
    """``tool``'s JSON schema as the chat template gets it (``{"type": "function", "function": {...}}``); a
    ConfigError naming the tool ``name`` and what it lacks when transformers cannot build it."""
    try:
        return get_json_schema(tool)
    except Exception as err:  # noqa: BLE001 - TypeHintParsingException, DocstringParsingException, ...: one line
        raise ConfigError(
            f"{name}: its tool schema cannot be built ({err}); a tool needs a type hint on every parameter and a "
            "Google-style docstring with an 'Args:' line for each"
        ) from err


def environment_tools(cls: type) -> list[str]:
    """The names of ``cls``'s tool methods: its plain functions A-Z, minus ``reset``, ``get_reward`` and ``_``
    names (TRL 1.16's rule)."""
    return [
        name
        for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in NOT_TOOLS and not name.startswith("_")
    ]


def defines(cls: type, name: str) -> bool:
    """Whether ``cls`` has a plain function ``name`` (TRL's test for ``reset`` and ``get_reward``)."""
    return any(member == name for member, _ in inspect.getmembers(cls, predicate=inspect.isfunction))


def bound_methods(instance: Any) -> list[Callable[..., Any]]:
    """``instance``'s tool methods, bound, in :func:`environment_tools` order."""
    return [getattr(instance, name) for name in environment_tools(type(instance))]


@dataclass
class ToolBox:
    """The tools one sample can call, by name: sync and async apart (TRL looks a name up in the sync ones first),
    and the schemas its prompt was rendered with (also what casts parsed arguments)."""

    sync: dict[str, Callable[..., Any]] = field(default_factory=dict)
    """Plain functions by ``__name__``; a call runs in a worker thread, in call order."""
    asynchronous: dict[str, Callable[..., Any]] = field(default_factory=dict)
    """``async def`` functions by ``__name__``; a turn's calls run gathered on the event loop, after the sync ones."""
    schemas: list[dict[str, Any]] = field(default_factory=list)
    """The tools' JSON schemas, in the order the prompt lists them."""


def tool_box(tools: Iterable[Callable[..., Any]], schemas: list[dict[str, Any]]) -> ToolBox:
    """A :class:`ToolBox` of ``tools`` (standalone tools, then an environment's bound methods); a later tool of
    the same name replaces an earlier one, as in TRL."""
    box = ToolBox(schemas=schemas)
    for tool in tools:
        (box.asynchronous if inspect.iscoroutinefunction(tool) else box.sync)[tool.__name__] = tool
    return box


def load_tools(paths: Iterable[str]) -> tuple[list[Callable[..., Any]], list[dict[str, Any]]]:
    """The standalone tools ``paths`` name (``agent.tools``) and their schemas, in order; a ConfigError naming
    ``tools`` and the path for the first one that does not import or has no schema."""
    paths = list(paths)
    tools = [load_tool(path, "tools") for path in paths]
    return tools, [tool_schema(tool, f"tools: {path!r}") for tool, path in zip(tools, paths, strict=True)]


def load_factories(environment: str | Mapping[str, str] | None) -> dict[str | None, Factory]:
    """``agent.environment``'s factories by name (None for a single one); a ConfigError naming
    ``environment`` for a path that does not import, an environment without ``reset`` or a method without a
    schema. A class is checked as it is; another factory is called once to see what it makes (as TRL does)."""
    if environment is None:
        return {}
    if isinstance(environment, str):
        paths: dict[str | None, str] = {None: environment}
    elif not environment:
        raise ConfigError("environment={} names no environment; valid: an import path, or a mapping of names to them")
    else:
        paths = dict(environment)
    factories = {}
    for name, path in paths.items():
        factories[name] = load_tool(path, "environment")
        cls = factories[name] if inspect.isclass(factories[name]) else type(factories[name]())
        check_environment(cls, f"environment: {path!r}")
        for method in environment_tools(cls):
            tool_schema(getattr(cls, method), f"environment: {path!r}'s method {method!r}")
    return factories


def check_environment(cls: type, where: str) -> None:
    """A ConfigError naming ``where`` unless ``cls`` defines ``reset`` as a plain function (TRL's rule)."""
    if not defines(cls, "reset"):
        raise ConfigError(
            f"{where} makes {cls.__name__} instances, which have no reset method; an environment needs "
            "reset(self, **row) returning None or a string to append to the prompt"
        )
