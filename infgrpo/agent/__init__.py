"""Agents: tools, environments and multi-turn rollouts with TRL 1.16's surface (``tools=``, ``environment_factory=``).

The host side of a multi-turn rollout: the ``model.agent`` settings, tool schemas, environments, the chat template's
tool messages and the calls of one turn. The engine's side is ``infgrpo.sampler.engine.turns``. The design is in
docs/architecture.md ("Agents").
"""

from infgrpo.agent.calls import CallResult, ToolTally, ToolWorkers, run_calls, stop_tool_calls
from infgrpo.agent.chat import (
    QWEN_TOOL_CALLS,
    check_tool_template,
    ensure_response_parser,
    load_template,
    parse_turn,
    render_prompt,
    tool_suffix_ids,
)
from infgrpo.agent.config import AgentConfig
from infgrpo.agent.environments import Environments, environment_reward
from infgrpo.agent.tool_watch import ToolWatch
from infgrpo.agent.tools import ToolBox, environment_tools, load_tools, tool_box, tool_schema
from infgrpo.agent.turns import ToolTurns

__all__ = [
    "QWEN_TOOL_CALLS",
    "AgentConfig",
    "CallResult",
    "Environments",
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
    "render_prompt",
    "run_calls",
    "stop_tool_calls",
    "tool_box",
    "tool_schema",
    "tool_suffix_ids",
]
