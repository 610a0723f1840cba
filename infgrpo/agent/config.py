"""AgentConfig: the tools, the environment and the turns of a multi-turn rollout (``model.agent``).

    AgentConfig(tools=["my_tools:add"], max_turns=4)        # TRL's tools=[add], max_tool_calling_iterations=4
    AgentConfig(environment="my_env:Wordle", chat_template="compact")      # TRL's environment_factory=Wordle
    AgentConfig(environment={"calc": "envs:Calc", "game": "envs:Wordle"})  # picked by a row's `environment` column
    AgentConfig(tools=["my_tools:add"], call_format="llama3")   # calls read as Llama 3.x's bare JSON
    AgentConfig(tools=[add], environment=Wordle)   # Python: the objects, as TRL's tools= / environment_factory=

Everything a setting alone decides is checked here, before any model loads: every import path imports, every tool's
schema can be built, no two tools share a name, every environment can be made without arguments and defines
``reset``, ``max_turns`` is at least 1, ``tool_timeout`` is positive, a template file exists and ``call_format``
names a format infgrpo reads. Whether the chat template renders a tool exchange, and in which call format, needs the
tokenizer: :func:`infgrpo.agent.chat.prepare_template`.

A checkpoint records each object by its import path (:meth:`AgentConfig.recorded`); see
:mod:`infgrpo.agent.tools` for one that has none.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infgrpo.agent.formats import FORMATS
from infgrpo.agent.tools import load_factories, load_tools, recorded
from infgrpo.settings import ConfigError, check_types

COMPACT = "compact"
"""``chat_template`` value of the compact ChatML template shipped for the tiny models (``templates/compact.jinja``)."""


@dataclass
class AgentConfig:
    """Tools and environments the policy calls in the middle of its completions (TRL 1.16's ``tools=``,
    ``environment_factory=`` and ``max_tool_calling_iterations``). Off while both ``tools`` and ``environment``
    are empty."""

    tools: list[str] = field(default_factory=list)
    """Tool functions by import path, ``module.path:function`` (TRL's ``tools=[...]``; in Python also the functions
    themselves): plain or ``async def`` functions with a type hint on every parameter and a Google-style docstring
    with an ``Args:`` line for each; their schemas go into the prompt through the chat template, in this order. Each
    name once."""
    environment: str | dict[str, str] | None = None
    """An environment class or factory by import path (TRL's ``environment_factory``; in Python also the class
    itself), made with no arguments: one instance per sample, ``reset(**row)`` before the rollout (a returned string
    is appended to the prompt's last message), its public methods are tools, an optional ``get_reward()`` one more
    reward (named after the class, weight 1). A mapping of names to import paths picks one per row by the data's
    ``environment`` column. Null: no environment."""
    max_turns: int | None = None
    """Most tool rounds a completion runs (TRL's ``max_tool_calling_iterations``): a turn's calls past it are
    parsed but never run, and the completion ends there. Null: unbounded, as in TRL (``max_new_tokens`` and the
    context still end it). At least 1."""
    tool_workers: int = 8
    """Threads that run sync tools (a sample's calls stay in call order; samples run side by side, while the
    others decode). Async tools run on one event-loop thread. At least 1."""
    tool_timeout: float | None = 60.0
    """Seconds a tool call may run: after them the call's result is ``{"error": "<tool> timed out after N s"}`` and
    the sample goes on (a sync tool's thread is abandoned, an async one cancelled; counted in ``tools/timeouts``).
    TRL has no limit, so one hung call hangs training; 60 s passes a real tool's slow call (a sandboxed run, a
    request with retries) and costs a hung one a minute a step, not the run. Raise it for tools slow by design.
    Null: no limit, as in TRL."""
    chat_template: str | None = None
    """The chat template that renders the tool schemas, calls and results. Null: the tokenizer's own; 'compact': a
    small ChatML template with Qwen's ``<tool_call>`` / ``<tool_response>`` blocks, for the tiny models (a stock
    tool template's prompt is longer than their context); else the path of a ``.jinja`` file."""
    call_format: str | None = None
    """How the model writes tool calls, read back with that format's parser: ``qwen``, ``qwen3.5``, ``nemotron3``,
    ``llama3``, ``gpt-oss``, ``glm4``, ``lfm2`` or ``gemma4``. Null: the format the chat template renders (every
    stock template TRL 1.16 trains with tools is recognised, edited copies too). A ``response_template`` already on
    the tokenizer is used as it is."""

    def __post_init__(self) -> None:
        check_types(self.as_paths())  # the annotations are the command line's (strings); Python may pass objects
        if self.max_turns is not None and self.max_turns < 1:
            raise ConfigError(f"max_turns={self.max_turns!r} must be an integer >= 1, or null (unbounded)")
        if self.tool_workers < 1:
            raise ConfigError(f"tool_workers={self.tool_workers!r} must be an integer >= 1")
        if self.call_format is not None and self.call_format not in FORMATS:
            raise ConfigError(
                f"call_format={self.call_format!r} is no call format infgrpo reads; valid: null (the one the chat "
                f"template renders), {', '.join(map(repr, FORMATS))}"
            )
        timeout = self.tool_timeout
        if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
            raise ConfigError(f"tool_timeout={timeout!r} must be a number of seconds > 0, or null (no limit, as TRL)")
        tools, _ = load_tools(self.tools)  # imports, a schema each, each name once
        load_factories(self.environment, tools)  # imports, made without arguments, a reset, every method's schema
        template = self.chat_template
        if template is not None and template != COMPACT and not Path(template).expanduser().is_file():
            raise ConfigError(
                f"chat_template={template!r} is no file; valid: null (the tokenizer's own), {COMPACT!r} or the path "
                "of a .jinja file"
            )

    def as_paths(self) -> AgentConfig:
        """A copy whose tools and environments are import paths (:meth:`recorded`), not checked again."""
        paths, plain = copy.copy(self), self.recorded()
        paths.tools, paths.environment = plain["tools"], plain["environment"]
        return paths

    def recorded(self) -> dict[str, Any]:
        """The fields as plain values, each tool and environment given as an object as its import path (what a
        checkpoint's hyper-parameters hold; an object without one as ``(no import path) <name>``)."""
        environment = self.environment
        if isinstance(environment, dict):
            environment = {name: _path(entry) for name, entry in environment.items()}
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        tools = [_path(tool) for tool in self.tools] if isinstance(self.tools, list | tuple) else self.tools
        return {**fields, "tools": tools, "environment": _path(environment)}

    @property
    def enabled(self) -> bool:
        """Whether completions may call tools: a tool or an environment is set."""
        return bool(self.tools) or bool(self.environment)


def _path(entry: Any) -> Any:
    """``entry`` as a checkpoint records it when it is a callable object (:func:`~infgrpo.agent.tools.recorded`);
    anything else as it is (the type check names what is wrong)."""
    return recorded(entry) if callable(entry) and not isinstance(entry, str) else entry
