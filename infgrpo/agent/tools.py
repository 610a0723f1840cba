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

A tool or an environment may also be given as the object itself (the Python API, as TRL's ``tools=[add]`` and
``environment_factory=Wordle``): :func:`import_path` finds the path a checkpoint records for it, and
:func:`recorded` writes ``(no import path) <name>`` for one that has none (a lambda, a local function or class, a
``functools.partial``), which :func:`load_tool` refuses in one line naming the fix. Two tools of one name (or one
listed twice) are refused: a completion calls a tool by name, so one of them could never be called. An environment
must be made with no arguments (TRL calls ``environment_factory()``): a class whose constructor needs some is
refused before any model loads.

An environment's tools are the plain functions of its class (``inspect.getmembers(cls, inspect.isfunction)``:
inherited ones and staticmethods included, classmethods and properties not), in alphabetical order, minus
``reset``, ``get_reward`` and names starting with ``_`` (TRL's rule, read on the class so properties are not
evaluated).
"""

from __future__ import annotations

import importlib
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
NO_PATH = "(no import path) "
"""How a checkpoint records a tool or environment given as an object that has no import path."""
Entry = str | Callable[..., Any]
"""A tool or environment as ``model.agent`` takes it: an import path, or (Python) the object itself."""


def import_path(obj: Any) -> str | None:
    """``module:qualname`` that imports ``obj`` itself, or None (a lambda, a local function or class, a
    ``functools.partial``, an object whose path names something else)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qualname}" if found is obj else None


def recorded(entry: Entry) -> str:
    """``entry`` as a checkpoint records it: an import path as given, an object's :func:`import_path`, else
    :data:`NO_PATH` and its name."""
    if isinstance(entry, str):
        return entry
    path = import_path(entry)
    if path is not None:
        return path
    name = getattr(entry, "__qualname__", None) or getattr(entry, "__name__", None) or repr(entry)
    return f"{NO_PATH}{name}"


def load_tool(path: Entry, field_name: str) -> Callable[..., Any]:
    """The callable ``path`` (``"module.path:function"``, or the callable itself) names; a ConfigError naming
    ``field_name``, the path and what is valid when it is no such path, does not import or is not callable."""
    if callable(path) and not isinstance(path, str):
        return path
    if isinstance(path, str) and path.startswith(NO_PATH):
        raise ConfigError(
            f"{field_name}: {path[len(NO_PATH) :]!r} was given as an object without an import path (a lambda, a local "
            "function or class, a functools.partial), so the checkpoint could not record where it comes from; pass "
            "it again: GRPOModule.load_from_checkpoint(path, agent={...}) takes the agent settings, objects included"
        )
    if not isinstance(path, str) or ":" not in path:
        raise ConfigError(
            f"{field_name}: {path!r} is not an import path; write 'module.path:function' (in Python: or the function "
            "or class itself)"
        )
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


def load_tools(paths: Iterable[Entry]) -> tuple[list[Callable[..., Any]], list[dict[str, Any]]]:
    """The standalone tools ``paths`` name (``agent.tools``: import paths, or the functions) and their schemas, in
    order; a ConfigError naming ``tools`` and the path for the first one that does not import, has no schema or
    shares its name with another (:func:`check_tool_names`)."""
    paths = list(paths)
    tools = [load_tool(path, "tools") for path in paths]
    for tool, path in zip(tools, paths, strict=True):
        if not isinstance(getattr(tool, "__name__", None), str):
            raise ConfigError(
                f"tools: {recorded(path)!r} has no __name__, the name a completion calls it by (a functools.partial, a "
                "callable object); give a function (def), which may call it"
            )
    check_tool_names([(tool.__name__, f"tools: {recorded(path)!r}") for tool, path in zip(tools, paths, strict=True)])
    return tools, [tool_schema(tool, f"tools: {recorded(path)!r}") for tool, path in zip(tools, paths, strict=True)]


def check_tool_names(named: list[tuple[str, str]]) -> None:
    """A ConfigError when two of ``named`` ((the name a completion calls, where it comes from), in prompt order)
    share a name: one tool listed twice, or two tools of one name (a completion calls a tool by name, so only one of
    them could ever run; TRL keeps the last silently)."""
    seen: dict[str, str] = {}
    for name, where in named:
        if name in seen and seen[name] == where:
            raise ConfigError(f"{where} is listed twice; list each tool once")
        if name in seen:
            raise ConfigError(
                f"{seen[name]} and {where} are both tools named {name!r}; a completion calls a tool by name, so "
                "only one could ever run: rename one (its __name__), or drop one"
            )
        seen[name] = where


def check_no_arguments(factory: Callable[..., Any], where: str) -> None:
    """A ConfigError naming ``where`` when ``factory`` cannot be called without arguments, as TRL makes every
    environment (``environment_factory()``)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: left to the call
        return
    try:
        signature.bind()
    except TypeError:
        needed = [
            p.name
            for p in signature.parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        what = getattr(factory, "__name__", type(factory).__name__)
        raise ConfigError(
            f"{where} cannot be made without arguments ({what} needs {', '.join(map(repr, needed))}); an environment "
            "is made once per sample with none, as TRL's environment_factory is: give defaults, or a factory that "
            f"takes none (a function, or functools.partial({what}, ...) in Python)"
        ) from None


def load_factories(
    environment: Entry | Mapping[str, Entry] | None, tools: Iterable[Callable[..., Any]] = ()
) -> dict[str | None, Factory]:
    """``agent.environment``'s factories by name (None for a single one); a ConfigError naming
    ``environment`` for a path that does not import, a factory that needs arguments, an environment without
    ``reset``, a method without a schema or one named as one of the standalone ``tools``. A class is checked as it
    is; another factory is called once to see what it makes (as TRL does)."""
    standalone = [(tool.__name__, f"tools: {recorded(tool)!r}") for tool in tools]
    if environment is None:
        return {}
    if isinstance(environment, Mapping) and not environment:
        raise ConfigError("environment={} names no environment; valid: an import path, or a mapping of names to them")
    paths: dict[str | None, Entry] = dict(environment) if isinstance(environment, Mapping) else {None: environment}
    factories = {}
    for name, path in paths.items():
        where = f"environment: {recorded(path)!r}"
        factories[name] = factory = load_tool(path, "environment")
        check_no_arguments(factory, where)
        cls = environment_class(factory)
        check_environment(cls, where)
        for method in environment_tools(cls):
            tool_schema(getattr(cls, method), f"{where}'s method {method!r}")
        check_tool_names([*standalone, *((m, f"{where}'s method {m!r}") for m in environment_tools(cls))])
    return factories


def environment_class(factory: Factory) -> type:
    """The class of the environments ``factory`` makes: itself when it is a class, else what one call makes."""
    return factory if inspect.isclass(factory) else type(factory())


def check_environment(cls: type, where: str) -> None:
    """A ConfigError naming ``where`` unless ``cls`` defines ``reset`` as a plain function (TRL's rule)."""
    if not defines(cls, "reset"):
        raise ConfigError(
            f"{where} makes {cls.__name__} instances, which have no reset method; an environment needs "
            "reset(self, **row) returning None or a string to append to the prompt"
        )
