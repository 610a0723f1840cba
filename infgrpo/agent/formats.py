"""Call formats: how a chat template writes a tool call, and the response template that reads one back.

    fmt = recognise(tokenizer, template)       # the format the template renders, or None: FORMATS["llama3"], ...
    tokenizer.response_template = fmt.parser()  # what ``tokenizer.parse_response`` reads a model turn with
    FORMATS["gpt-oss"].families                 # 'gpt-oss'

A format is recognised by what a template renders, not by its text: the template renders a probe exchange (a user
message, then an assistant turn calling ``probe_fn(probe_key="probe_value")``) and the generation prompt with
thinking off, and each format's patterns are matched against that text. So a re-upload whose template was edited (a
new default system prompt, reformatted Jinja) reads as its family, where TRL 1.16's ``add_response_schema`` compares
the template's text with the stock ones it ships and refuses any other.

The formats are facts of the stock templates (the text a call is written in); the response templates are
transformers' ``response_template`` dicts (``tokenizer.parse_response``), written here to read what TRL 1.16's
``add_response_schema`` reads for the same stock templates (``tests/agent/test_formats.py`` holds every stock
template TRL ships against TRL's parse). A template whose calls match none of these can name one with
``agent.call_format``, or set ``tokenizer.response_template`` itself.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from jinja2 import TemplateError
from transformers import PreTrainedTokenizerBase

PROBE_NAME, PROBE_KEY, PROBE_VALUE = "probe_fn", "probe_key", "probe_value"
"""The probe call: its function name, argument key and (string) value."""

PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": PROBE_NAME,
        "description": "A probe.",
        "parameters": {
            "type": "object",
            "properties": {PROBE_KEY: {"type": "string", "description": "A key."}},
            "required": [PROBE_KEY],
        },
    },
}
"""The probe call's tool schema (some templates render a call only for a declared tool)."""


def _text(close: str, **more: Any) -> dict[str, Any]:
    """A text field that ends at ``close`` (a regex)."""
    return {"close_pattern": close, "content": "text", **more}


def _named_calls(open_pattern: str, close: str, content: str, **args: Any) -> dict[str, Any]:
    """Repeated tool calls whose name ``open_pattern`` captures (``(?P<name>...)``) and whose arguments are the
    text up to ``close``, read by the content parser ``content`` (``json``, ``xml-inline``)."""
    spec: dict[str, Any] = {"open_pattern": open_pattern, "close_pattern": close, "repeats": True, "content": content}
    if args:
        spec["content_args"] = args
    spec["transform"] = {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}
    return spec


def _bracketed_value(depth: int = 3) -> str:
    """A regex for a Pythonic argument value: a single-quoted string, a list or mapping (brackets nested up to
    ``depth`` levels: a regex cannot count them), or a bare literal up to the next ``,`` or ``)``."""
    atom = r"""[^\[\]{}'"]|'[^']*'|"[^"]*\""""
    nested = atom
    for _ in range(depth):
        nested = rf"{atom}|[\[{{](?:{nested})*[\]}}]"
    return rf"'[^']*'|[\[{{](?:{nested})*[\]}}]|[^,)]*"


_THINK = {"open": "<think>", "close_pattern": r"</think>\s*", "content": "text"}
_CHATML = "<|im_start|>assistant\n"
"""ChatML's assistant turn opening (Qwen's, Nemotron 3's, LFM2's templates)."""
_CHATML_END = _text(r"<\|im_end\|>\s*")
"""ChatML's turn's text, up to its end."""
_XML_PARAMETERS = {
    "tag_pattern": r"<parameter=(?P<key>[^>\n]+)>\s*(?P<value>.*?)\s*</parameter>",
    "value_parser": {"name": "text"},  # parse_response types each value by the tool's schema
}
_XML_CALLS = _named_calls(
    r"<tool_call>\s*<function=(?P<name>[^\n>]+)>", r"</tool_call>\s*", "xml-inline", **_XML_PARAMETERS
)
_JSON_CALLS = {
    "open": "<tool_call>",
    "close_pattern": r"</tool_call>\s*",
    "repeats": True,
    "content": "json",
    "transform": {"type": "function", "function": "{content}"},
}
"""Qwen's calls: a JSON object of ``name`` and ``arguments`` in each ``<tool_call>`` block."""


def _qwen_turn(tool_calls: dict[str, Any]) -> dict[str, Any]:
    """The ``response_template`` of a Qwen assistant turn (ChatML, an optional think block) whose calls read as
    ``tool_calls``."""
    fields = {"reasoning_content": _THINK, "tool_calls": tool_calls, "content": _CHATML_END}
    return {"defaults": {"role": "assistant"}, "start_anchor": _CHATML, "fields": fields}


@dataclass(frozen=True)
class CallFormat:
    """One way of writing tool calls, the stock templates that write it, and the parser that reads it."""

    name: str
    """The value of ``agent.call_format`` that names it."""
    families: str
    """The stock chat templates that write it (for the docs and error lines)."""
    call: str
    """A regex the probe exchange's rendering matches: the assistant turn's opening, then its call."""
    response_template: dict[str, Any] = field(repr=False)
    """transformers' ``response_template``: what ``tokenizer.parse_response`` reads a model turn with."""
    prompt: str | None = None
    """A regex the generation prompt with thinking off must also match (None: any)."""

    def parser(self) -> dict[str, Any]:
        """A copy of :attr:`response_template`, to set on a tokenizer."""
        return copy.deepcopy(self.response_template)

    def renders(self, exchange: str, prompt: str) -> bool:
        """Whether a template that renders the probe ``exchange`` and the thinking-off generation ``prompt`` so
        writes calls in this format."""
        return re.search(self.call, exchange, re.S) is not None and (
            self.prompt is None or re.search(self.prompt, prompt, re.S) is not None
        )


def _turn(opening: str, call: str) -> str:
    """The probe's assistant turn: ``opening`` (escaped), anything that does not open a new turn, then ``call``."""
    return re.escape(opening) + r"(?:(?!" + re.escape(opening) + r").)*?" + call


_ARGS_JSON = r'\{"' + PROBE_KEY + r'": "' + PROBE_VALUE + r'"\}'
_XML_PROBE = _turn(_CHATML, rf"<tool_call>\s*<function={PROBE_NAME}>\s*<parameter={PROBE_KEY}>")
"""The probe's call in Qwen3.5's and Nemotron 3's XML."""

CALL_FORMATS: tuple[CallFormat, ...] = (
    CallFormat(
        "qwen",
        "Qwen2.5, Qwen3, Qwen3-2507, Qwen3-VL; infgrpo's compact template",
        _turn(_CHATML, r'<tool_call>\s*\{"name": "' + PROBE_NAME + r'", "arguments": ' + _ARGS_JSON),
        _qwen_turn(_JSON_CALLS),
    ),
    CallFormat(
        "nemotron3",
        "Nemotron 3 Nano, Super and Ultra, Nemotron 3.5 Lightning",
        _XML_PROBE,
        {
            "defaults": {"role": "assistant"},
            # the prompt opens the reasoning (<think> and a newline, or <think></think> with thinking off)
            "start_anchor_pattern": r"<\|im_start\|>assistant\n<think>(?:\n|</think>)?",
            "fields": {
                "reasoning_content": {"open_pattern": r"(?=[\s\S]*?</think>)", "close_pattern": r"</think>\s*"},
                "tool_calls": _XML_CALLS,
                "content": _CHATML_END,
            },
        },
        prompt=r"<\|im_start\|>assistant\n<think></think>$",
    ),
    CallFormat(
        "qwen3.5",
        "Qwen3.5, Qwen3.6, Qwen3.8",
        _XML_PROBE,
        _qwen_turn(_XML_CALLS),
    ),
    CallFormat(
        "llama3",
        "Llama 3.1, Llama 3.2",
        _turn("<|start_header_id|>assistant<|end_header_id|>\n\n", rf'\{{"name": "{PROBE_NAME}", "parameters": '),
        {
            "defaults": {"role": "assistant"},
            "start_anchor": "<|start_header_id|>assistant<|end_header_id|>\n\n",
            "fields": {
                # one bare JSON object, "parameters" for "arguments", up to the end of the turn
                "tool_calls": _named_calls(
                    r'\{"name":\s*"(?P<name>[^"]+)",\s*"parameters":\s*', r"\}<\|eot_id\|>\s*", "json"
                ),
                "content": _text(r"<\|eot_id\|>\s*"),
            },
        },
    ),
    CallFormat(
        "gpt-oss",
        "gpt-oss",
        re.escape(f"<|start|>assistant to=functions.{PROBE_NAME}<|channel|>commentary json<|message|>") + _ARGS_JSON,
        {
            "defaults": {"role": "assistant"},
            "start_anchor": "<|start|>assistant",
            "fields": {
                "thinking": {"open": "<|channel|>analysis<|message|>", "close_pattern": r"<\|end\|>\s*"},
                "content": {"open": "<|channel|>final<|message|>", "close_pattern": r"<\|return\|>\s*"},
                "tool_calls": _named_calls(
                    r"to=functions\.(?P<name>\S+?)<\|channel\|>commentary\s+json<\|message\|>", r"<\|call\|>\s*", "json"
                ),
            },
        },
    ),
    CallFormat(
        "glm4",
        "GLM-4-MoE (GLM-4.5)",
        _turn("<|assistant|>", rf"<tool_call>{PROBE_NAME}\s*<arg_key>{PROBE_KEY}</arg_key>\s*<arg_value>"),
        {
            "defaults": {"role": "assistant"},
            "start_anchor": "<|assistant|>",
            "fields": {
                "reasoning_content": _THINK,
                "tool_calls": _named_calls(
                    r"<tool_call>(?P<name>\S+)\n?",
                    r"</tool_call>\s*",
                    "xml-inline",
                    tag_pattern=r"<arg_key>(?P<key>[^<]+)</arg_key>\s*\n<arg_value>(?P<value>.*?)</arg_value>",
                    value_parser={"name": "text"},
                ),
                "content": _text(r"<\|user\|>\s*|$"),
            },
        },
    ),
    CallFormat(
        "lfm2",
        "LFM2 (its second template), LFM2.5, LFM2.5-VL",
        _turn(_CHATML, re.escape(f"<|tool_call_start|>[{PROBE_NAME}({PROBE_KEY}='{PROBE_VALUE}')")),
        {
            "defaults": {"role": "assistant"},
            "start_anchor": _CHATML,
            "fields": {
                "thinking": _THINK,
                # one block of Pythonic calls: [f(a=1, b='x'), g()]; a value is quoted, bracketed or bare
                "tool_calls": _named_calls(
                    r"(?:<\|tool_call_start\|>\[|,\s*)(?P<name>\w+)\(",
                    r"\)(?:\]<\|tool_call_end\|>)?\s*",
                    "xml-inline",
                    tag_pattern=r"(?P<key>\w+)=(?P<value>" + _bracketed_value() + ")",
                    value_parser={"name": "json", "args": {"string_delims": [["'", "'"]], "allow_non_json": True}},
                ),
                "content": _CHATML_END,
            },
        },
    ),
    CallFormat(
        "gemma4",
        "Gemma 4 (its five template revisions)",
        _turn("<|turn>model\n", re.escape(f'<|tool_call>call:{PROBE_NAME}{{{PROBE_KEY}:<|"|>{PROBE_VALUE}<|"|>}}')),
        {
            "defaults": {"role": "assistant"},
            "start_anchor_pattern": r"(?:<\|turn>model\n|<tool_response\|>)",
            "fields": {
                "reasoning_content": {"open": "<|channel>thought\n", "close_pattern": r"<channel\|>\s*"},
                "tool_calls": _named_calls(
                    r"<\|tool_call>call:(?P<name>\w+)",
                    r"<tool_call\|>\s*",
                    "json",
                    string_delims=[['<|"|>', '<|"|>']],
                    unquoted_keys=True,
                ),
                "content": _text(r"(?:<turn\|>|<\|tool_response>|<eos>)\s*|$"),
            },
        },
    ),
)
"""Every call format infgrpo reads, in the order they are tried (Nemotron 3 before Qwen3.5: the same calls, told
apart by the generation prompt with thinking off)."""


FORMATS: dict[str, CallFormat] = {fmt.name: fmt for fmt in CALL_FORMATS}
"""The call formats by name (``agent.call_format``)."""


def _probe_call(arguments: dict[str, Any] | str) -> list[dict[str, Any]]:
    """A user message, then an assistant turn that calls the probe with ``arguments``."""
    call = {"type": "function", "function": {"name": PROBE_NAME, "arguments": arguments}}
    return [{"role": "user", "content": "probe"}, {"role": "assistant", "content": "", "tool_calls": [call]}]


def probe_renders(tokenizer: PreTrainedTokenizerBase, template: str | None) -> tuple[str, str] | None:
    """What ``template`` (None: the tokenizer's) renders for the probe exchange with the probe tool, and for the
    generation prompt with thinking off; None when it cannot render them (a TemplateError)."""

    def render(messages: list[dict[str, Any]], **kw: Any) -> str:
        return tokenizer.apply_chat_template(messages, chat_template=template, tools=[PROBE_TOOL], tokenize=False, **kw)

    try:
        try:
            exchange = render(_probe_call({PROBE_KEY: PROBE_VALUE}))
        except TypeError:  # a template that takes string arguments only (TRL retries the same way)
            exchange = render(_probe_call(f'{{"{PROBE_KEY}": "{PROBE_VALUE}"}}'))
        prompt = render(_probe_call({})[:1], add_generation_prompt=True, enable_thinking=False)
    except TemplateError:
        return None
    return exchange, prompt


def recognise(tokenizer: PreTrainedTokenizerBase, template: str | None) -> CallFormat | None:
    """The first of :data:`CALL_FORMATS` that ``template`` (None: the tokenizer's own) writes its calls in, judged
    by what it renders (:func:`probe_renders`); None when it renders none of them."""
    renders = probe_renders(tokenizer, template)
    if renders is None:
        return None
    return next((fmt for fmt in CALL_FORMATS if fmt.renders(*renders)), None)
