"""One turn's calls: TRL 1.16's message order, contents and counts (its own ``_tool_call_loop`` as the reference)."""

import json

import pytest

from infgrpo.agent.calls import ToolWorkers, run_calls
from infgrpo.agent.chat import render_prompt
from infgrpo.agent.tools import tool_box, tool_schema
from tests.agent import toolbox
from tests.agent.trl_reference import trl_tool_loop

TOOLS = [toolbox.add, toolbox.mul, toolbox.broken, toolbox.broken_async, toolbox.echo]


def call(name, **arguments):
    """A parsed tool call."""
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.fixture(scope="module")
def workers():
    """Tool threads and the event loop, shared by the tests of this file."""
    workers = ToolWorkers(2)
    yield workers
    workers.close()


def box():
    """Every test tool, by name."""
    return tool_box(TOOLS, [tool_schema(t, t.__name__) for t in TOOLS])


MIXED = [
    call("mul", a=3, b=4),  # async: after every sync result
    call("add", a=2, b=3),
    call("nope", x=1),  # unknown name
    call("broken_async", x=2),  # async failure
    call("broken", x=1),  # sync failure
    call("add", a=2),  # missing argument: TypeError when called
    call("echo", text="hi"),  # a list result, kept as it is
    call("mul", a=2, c=1),  # async with a bad argument: fails when the coroutine is made, in the sync pass
    {"type": "code", "name": "run"},  # unsupported type
]


def test_messages_follow_trls_order_contents_and_counts(workers):
    result = run_calls(MIXED, box(), workers.loop)
    assert [m["name"] for m in result.messages] == [
        "add", "nope", "broken", "add", "echo", "mul", "run", "mul", "broken_async",
    ]  # fmt: skip
    contents = [m["content"] for m in result.messages]
    assert contents[:3] == ["5", "{'error': 'Tool nope not found.'}", "{'error': 'broken on 1'}"]
    assert contents[3].startswith("{'error': ") and "missing 1 required positional argument" in contents[3]
    assert contents[4] == [{"type": "text", "text": "hi"}]
    assert "unexpected keyword argument 'c'" in contents[5]
    assert contents[6:] == ["{'error': 'Unsupported tool call type: code'}", "12", "{'error': '2'}"]
    assert all(m["role"] == "tool" for m in result.messages)
    assert (result.calls, result.failures) == (9, 6)


def test_without_a_loop_async_tools_run_in_this_thread():
    result = run_calls([call("mul", a=6, b=7), call("add", a=1, b=1)], box(), None)
    assert [m["content"] for m in result.messages] == ["2", "42"]


def test_run_calls_equals_trls_tool_loop(tiny, workers):
    tok, template = tiny
    calls = [c for c in MIXED if c.get("type") == "function" and c["function"]["name"] != "echo"]
    text = "\n".join(f"<tool_call>\n{json.dumps(c['function'])}\n</tool_call>" for c in calls)
    turn = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]  # the model's turn making them
    schemas = [tool_schema(t, t.__name__) for t in TOOLS]
    prompt = render_prompt(tok, [{"role": "user", "content": "go"}], schemas, template)
    _, completions, _, trl_calls, trl_failures = trl_tool_loop(
        tok, template, TOOLS, [prompt], [turn], [[]], workers.loop
    )
    assert completions[0][0]["tool_calls"] == calls  # TRL parsed the turn into exactly these calls
    ours = run_calls(calls, box(), workers.loop)
    assert ours.messages == completions[0][1:]
    assert (ours.calls, ours.failures) == (trl_calls, trl_failures) == (7, 5)
