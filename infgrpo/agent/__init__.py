"""Agents: tools, environments and multi-turn rollouts with TRL 1.16's surface (``tools=``, ``environment_factory=``).

The host side of a multi-turn rollout: the ``model.agent`` settings, tool schemas, environments, the chat template's
tool messages and the calls of one turn. The engine's side is ``infgrpo.sampler.engine.turns``. The design is in
docs/architecture.md ("Agents").
"""

from infgrpo.agent.calls import CallResult, ToolTally, ToolWorkers, run_calls, stop_tool_calls
from infgrpo.agent.chat import (
    check_tool_template,
    ensure_response_parser,
    load_template,
    parse_turn,
    prepare_template,
    render_prompt,
    tool_suffix_ids,
)
from infgrpo.agent.config import AgentConfig
from infgrpo.agent.environments import AgentError, Environments, environment_reward
from infgrpo.agent.formats import CALL_FORMATS, FORMATS, CallFormat, recognise
from infgrpo.agent.tool_watch import ToolWatch
from infgrpo.agent.tools import ToolBox, environment_tools, load_tools, tool_box, tool_schema
from infgrpo.agent.turns import Exchange, ToolTurns

__all__ = [
    "CALL_FORMATS",
    "FORMATS",
    "AgentConfig",
    "AgentError",
    "CallFormat",
    "CallResult",
    "Environments",
    "Exchange",
    "ToolBox",
    "ToolTally",
    "ToolTurns",
    "ToolWatch",
    "ToolWorkers",
    "check_tool_template",
    "ensure_response_parser",
    "environment_reward",
    "environment_tools",
    "load_template",
    "load_tools",
    "parse_turn",
    "prepare_template",
    "recognise",
    "render_prompt",
    "run_calls",
    "stop_tool_calls",
    "tool_box",
    "tool_schema",
    "tool_suffix_ids",
]
