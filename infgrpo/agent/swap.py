"""Qwen3's own chat template, recognised by what it renders, and the prefix-preserving one infgrpo renders with.

    template = swap_for(tokenizer, None)   # infgrpo's qwen3.jinja when the tokenizer's template renders as Qwen3's

Qwen3's template drops the ``<think>`` block of assistant turns before the last user query and writes an empty one
only when the assistant turn is the last message. So a turn that called a tool renders one way before its result
and another once the result follows: not prefix-preserving, and the ids of a tool result cannot be cut from the
difference. TRL 1.16's ``GRPOTrainer`` swaps in its training template for that one stock template (matched by its
exact text); infgrpo ships ``templates/qwen3.jinja``, which writes Qwen3's format with every think block kept
(the same ids as TRL's training template), and swaps it in for any template that renders the probe conversations
below exactly as Qwen3's does: a reformatted or re-uploaded copy included.
"""

from __future__ import annotations

from typing import Any

from jinja2 import TemplateError
from transformers import PreTrainedTokenizerBase

from infgrpo.agent.formats import PROBE_TOOL
from infgrpo.agent.shipped import shipped_template

_CALL = {"type": "function", "function": {"name": "probe_fn", "arguments": {"probe_key": "probe_value"}}}
_PROBES: tuple[tuple[list[dict[str, Any]], dict[str, Any]], ...] = (
    (
        [
            {"role": "system", "content": "probe system"},
            {"role": "user", "content": "probe query"},
            {"role": "assistant", "content": "probe answer", "reasoning_content": "probe thought"},
            {"role": "user", "content": "probe query"},
            {"role": "assistant", "content": "", "tool_calls": [_CALL]},
            {"role": "tool", "name": "probe_fn", "content": "probe result"},
            {"role": "assistant", "content": "probe answer", "reasoning_content": "probe thought"},
        ],
        {"tools": [PROBE_TOOL]},
    ),
    ([{"role": "user", "content": "probe query"}], {"add_generation_prompt": True, "enable_thinking": False}),
    (
        [{"role": "user", "content": "probe query"}, {"role": "assistant", "content": "", "tool_calls": [_CALL]}],
        {"tools": [PROBE_TOOL], "add_generation_prompt": False},
    ),
)
"""Conversations whose rendering tells Qwen3's template apart: a system prompt with tools, a thought before the
last query (dropped) and after it (kept), a tool call and its result, the generation prompt with thinking off,
and a tool call as the last turn (with its empty think block)."""


def renders_as_qwen3(tokenizer: PreTrainedTokenizerBase, template: str | None) -> bool:
    """Whether ``template`` (None: the tokenizer's own) renders every probe conversation as Qwen3's own template
    does (``qwen3.jinja`` with ``qwen3_own_turns``)."""
    ours = shipped_template("qwen3")
    try:
        return all(
            tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False, **kw)
            == tokenizer.apply_chat_template(messages, chat_template=ours, tokenize=False, qwen3_own_turns=True, **kw)
            for messages, kw in _PROBES
        )
    except (TemplateError, TypeError):
        return False


def swap_for(tokenizer: PreTrainedTokenizerBase, template: str | None) -> str | None:
    """The template to render tool exchanges with instead of ``template`` (None: the tokenizer's own), which does
    not keep the prefix: infgrpo's ``qwen3.jinja`` when it renders as Qwen3's; None when infgrpo has none."""
    return shipped_template("qwen3") if renders_as_qwen3(tokenizer, template) else None
