"""infgrpo's qwen3.jinja renders as TRL 1.16's Qwen3 training template, and with ``qwen3_own_turns`` as Qwen3's own;
Qwen3's template is recognised by that rendering, a reformatted copy too, and nothing else is."""

import itertools

import pytest

from infgrpo.agent.shipped import shipped_template
from infgrpo.agent.swap import renders_as_qwen3, swap_for
from infgrpo.policy.load import load_tokenizer
from tests.agent.families import stock_template


def call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


TOOL = {"type": "function", "function": {"name": "add", "description": "Adds.", "parameters": {"type": "object"}}}
U, S = {"role": "user", "content": "hi"}, {"role": "system", "content": "Be brief."}
A = {"role": "assistant", "content": "ok"}
THOUGHT = {"role": "assistant", "content": "ok", "reasoning_content": "\nthink hard\n"}
INLINE = {"role": "assistant", "content": "<think>\ninline</think>\n\nsure"}
CALL = {"role": "assistant", "content": "", "tool_calls": [call("add", {"a": 1})]}
CALLS = {"role": "assistant", "content": "Let me.", "tool_calls": [call("add", {"a": 1}), call("mul", '{"b": 2}')]}
ODD = {"role": "assistant", "content": "\n", "tool_calls": [call("add", {})], "reasoning_content": "r"}
T = {"role": "tool", "name": "add", "content": "3"}
WRAPPED = {"role": "user", "content": "<tool_response>\nx\n</tool_response>"}
LATE_SYSTEM = {"role": "system", "content": "late"}
CONVERSATIONS = [
    [U], [S, U], [U, THOUGHT], [S, U, CALL, T], [U, CALL, T, T, A], [U, THOUGHT, U, CALL, T, THOUGHT],
    [U, INLINE, U, INLINE], [S, U, CALLS, T, T, ODD, T], [U, CALL, WRAPPED, A], [U, LATE_SYSTEM, THOUGHT, U],
]  # fmt: skip
"""Every branch of Qwen3's template: system prompts with and without tools, thoughts given apart or inline, before
and after the last query, several calls with text, string arguments, grouped tool results, a result wrapped in a
user message, a late system message."""


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny")


def test_qwen3_jinja_renders_as_trls_training_template_and_as_qwen3s_own(tok):
    ours, own, training = shipped_template("qwen3"), stock_template("qwen3"), stock_template("qwen3_training")
    for messages, tools, generation, kwargs in itertools.product(
        CONVERSATIONS, [None, [TOOL, TOOL]], [False, True], [{}, {"enable_thinking": False}]
    ):
        case = dict(tools=tools, add_generation_prompt=generation, tokenize=False, **kwargs)
        ids = {
            name: tok.apply_chat_template(messages, chat_template=template, **case, **more)
            for name, template, more in [
                ("ours", ours, {}), ("training", training, {}), ("ours, own turns", ours, {"qwen3_own_turns": True}),
                ("own", own, {}),
            ]
        }  # fmt: skip
        assert ids["ours"] == ids["training"], case
        assert ids["ours, own turns"] == ids["own"], case


def test_only_templates_that_render_as_qwen3s_are_swapped(tok):
    own = stock_template("qwen3")
    assert swap_for(tok, own) == shipped_template("qwen3")
    reformatted = own.replace("{%- if tools %}", "{#- a re-upload -#}\n{%- if tools -%}\n   ", 1)
    assert reformatted != own and renders_as_qwen3(tok, reformatted)
    new_prompt = own.replace("# Tools\\n\\nYou may call", "# Tools\\n\\nYou can call", 1)
    assert new_prompt != own and swap_for(tok, new_prompt) is None  # renders otherwise: not Qwen3's any more
    others = ["qwen2_5", "qwen3_instruct_2507", "qwen3_vl", "qwen3_5_think", "nemotron_3_nano", "llama3_1", "gptoss"]
    assert [stem for stem in others if renders_as_qwen3(tok, stock_template(stem))] == []
    assert not renders_as_qwen3(tok, "{{ raise_exception('no') }}")
