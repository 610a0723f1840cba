"""AgentConfig: every refusal is one line naming ``agent.<field>``, the value and what is valid, before any model."""

import functools
import re

import pytest

from infgrpo.agent.config import AgentConfig
from infgrpo.settings import ConfigError, build_group
from tests.agent import toolbox

T = "tests.agent.toolbox"


def refusal(**fields):
    """The message of building ``model.agent`` from ``fields`` (as the settings do: ``agent.`` in front)."""
    with pytest.raises(ConfigError) as err:
        build_group(AgentConfig, fields, "agent")
    message = str(err.value)
    assert "\n" not in message
    return message


def test_a_valid_config_and_its_switch(tmp_path):
    assert not AgentConfig().enabled
    cfg = AgentConfig(tools=[f"{T}:add", f"{T}:mul"], max_turns=3, chat_template="compact")
    assert cfg.enabled and cfg.max_turns == 3
    assert AgentConfig(environment=f"{T}:Counter").enabled
    assert AgentConfig(environment={"count": f"{T}:Counter", "plain": f"{T}:Plain"}).enabled
    assert AgentConfig(environment=f"{T}:make_counter").enabled  # a factory function
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    assert AgentConfig(chat_template=str(template)).chat_template == str(template)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"max_turns": 0}, r"^agent\.max_turns=0 must be an integer >= 1, or null \(unbounded\)$"),
        ({"max_turns": "2"}, r"^agent\.max_turns='2' must be "),
        ({"tool_workers": 0}, r"^agent\.tool_workers=0 must be an integer >= 1$"),
        ({"tools": ["add"]}, r"^agent\.tools: 'add' is not an import path; write 'module.path:function' \(in Python"),
        ({"tools": [3]}, r"^agent\.tools=\[3\] must be a list of strings$"),
        ({"tools": [functools.partial(toolbox.add, b=1)]}, r"^agent\.tools: '\(no import path\) functools\.partial\("),
        ({"tool_timeout": 0}, r"^agent\.tool_timeout=0 must be a number of seconds > 0, or null \(no limit, as TRL\)$"),
        ({"tool_timeout": float("nan")}, r"^agent\.tool_timeout=nan must be a number of seconds > 0"),
        ({"tool_timeout": "1"}, r"^agent\.tool_timeout='1' must be a number or null$"),
        ({"tools": [f"{T}:add", f"{T}:add"]}, r"^agent\.tools: 'tests\.agent\.toolbox:add' is listed twice; list each"),
        (
            {"tools": [f"{T}:add", "infgrpo.assets.calculator:add"]},
            r"^agent\.tools: '.*toolbox:add' and tools: 'infgrpo\.assets\.calculator:add' are both tools named "
            r"'add'; a completion calls a tool by name, so only one could ever run",
        ),
        (
            {"tools": [f"{T}:add"], "environment": f"{T}:Adder"},
            r"^agent\.tools: '.*toolbox:add' and environment: '.*toolbox:Adder''s method 'add' are both tools named",
        ),
        (
            {"environment": f"{T}:Sized"},
            r"^agent\.environment: 'tests\.agent\.toolbox:Sized' cannot be made without arguments \(Sized needs "
            r"'size'\); an environment is made once per sample with none, as TRL's environment_factory is",
        ),
        ({"environment": {"s": f"{T}:make_sized"}}, r"^agent\.environment: '.*:make_sized' cannot be made without"),
        ({"tools": ["tests.agent.nowhere:add"]}, r"^agent\.tools: cannot import 'tests\.agent\.nowhere:add' \("),
        ({"tools": [f"{T}:missing"]}, r"^agent\.tools: cannot import 'tests\.agent\.toolbox:missing' \("),
        ({"tools": [f"{T}:NOT_CALLABLE"]}, r"^agent\.tools: 'tests\.agent\.toolbox:NOT_CALLABLE' is not callable$"),
        (
            {"tools": [f"{T}:add", f"{T}:no_hints"]},
            r"^agent\.tools: 'tests\.agent\.toolbox:no_hints': its tool schema cannot be built \(Argument a is "
            r"missing a type hint in function no_hints\); a tool needs a type hint on every parameter",
        ),
        ({"tools": [f"{T}:no_docstring"]}, r"^agent\.tools: '.*:no_docstring': .*\(.*has no docstring!\)"),
        ({"tools": [f"{T}:no_args_line"]}, r"^agent\.tools: '.*:no_args_line': .*no description for the argument 'a'"),
        (
            {"environment": f"{T}:NoReset"},
            r"^agent\.environment: 'tests\.agent\.toolbox:NoReset' makes NoReset instances, which have no reset "
            r"method; an environment needs reset\(self, \*\*row\)",
        ),
        ({"environment": f"{T}:make_no_reset"}, r"^agent\.environment: '.*:make_no_reset' makes NoReset instances"),
        ({"environment": {"a": f"{T}:Counter", "b": f"{T}:NoReset"}}, r"^agent\.environment: '.*:NoReset' makes"),
        ({"environment": f"{T}:BadMethod"}, r"^agent\.environment: '.*:BadMethod''s method 'move': its tool schema"),
        ({"environment": "nowhere:Env"}, r"^agent\.environment: cannot import 'nowhere:Env' \("),
        ({"environment": {}}, r"^agent\.environment=\{\} names no environment; valid: an import path, or a mapping"),
        (
            {"chat_template": "missing.jinja"},
            r"^agent\.chat_template='missing\.jinja' is no file; valid: null \(the tokenizer's own\), 'compact' or ",
        ),
    ],
)
def test_each_refusal_is_one_line_naming_the_field(fields, expected):
    assert re.search(expected, refusal(**fields))
