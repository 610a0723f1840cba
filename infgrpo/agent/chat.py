"""The chat template's side of a tool exchange: the template, its checks, the response parser and the token ids.

    template = prepare_template(tokenizer, cfg)   # the template to render with (None: the tokenizer's); parser set
    ids = render_prompt(tokenizer, messages, schemas, template, kwargs)  # TRL's prompt ids with the tool schemas
    message = parse_turn(tokenizer, turn_ids, prefix_ids, schemas)  # {"role": "assistant", "content", "tool_calls"?}
    suffix = tool_suffix_ids(tokenizer, tool_messages, template, kwargs)  # tool results + the next generation prompt

Each follows TRL 1.16 (``GRPOTrainer.__init__``'s tool set-up, ``_tokenize_prompts``, ``_get_tool_suffix_ids``,
``trl.chat_template_utils.parse_response`` / ``supports_tool_calling`` / ``is_chat_template_prefix_preserving``) and
is tested to give its ids and messages. :func:`prepare_template` is the one set-up both doors run (the command line's
preflight and ``AgentRollout``): the template must render a tool exchange; the tokenizer gets the response parser of
the call format the template writes (:mod:`infgrpo.agent.formats`, recognised by what it renders, or named by
``agent.call_format``; one already on the tokenizer is kept, as in TRL); a template that does not keep the prefix is
swapped for infgrpo's prefix-preserving copy when it renders as Qwen3's (:mod:`infgrpo.agent.swap`, as TRL swaps
Qwen3's). Anything else is one ConfigError line naming ``agent.chat_template`` and ``agent.call_format``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from transformers import PreTrainedTokenizerBase

from infgrpo.agent.config import COMPACT, AgentConfig
from infgrpo.agent.formats import CALL_FORMATS, FORMATS, recognise
from infgrpo.agent.shipped import TEMPLATES as TEMPLATES  # where the shipped templates are, for older callers
from infgrpo.agent.shipped import shipped_template
from infgrpo.agent.swap import swap_for
from infgrpo.settings import ConfigError, InfgrpoWarning

_PROBE = ("tool_name_probe", "tool_arg_key_probe", "tool_arg_val_probe", "tool_content_probe")
"""Sentinels of the template check: a call's name, argument key and value, and the result (TRL's check)."""

_FIX = (
    "pass agent.chat_template: compact (ChatML with Qwen's <tool_call> blocks) or the path of a .jinja template "
    "that renders tools, tool calls and tool results"
)


def load_template(cfg: AgentConfig) -> str | None:
    """The chat template text ``agent.chat_template`` names: None (the tokenizer's own), the compact one, or a
    file's text."""
    if cfg.chat_template is None:
        return None
    if cfg.chat_template == COMPACT:
        return shipped_template(COMPACT)
    return Path(cfg.chat_template).expanduser().read_text()


def template_name(setting: str | None) -> str:
    """How an error names the template ``agent.chat_template=setting`` stands for."""
    return "the tokenizer's own chat template" if setting is None else f"the chat template {setting!r}"


def _dummy_call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    """``user -> assistant`` with one tool call: the conversation TRL's checks and suffix ids start from."""
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": [call]}]


def _render(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], template: str | None, **kw: Any) -> Any:
    """``apply_chat_template`` of one conversation with ``template`` (None: the tokenizer's)."""
    return tokenizer.apply_chat_template(messages, chat_template=template, **kw)


def prepare_template(tokenizer: PreTrainedTokenizerBase, cfg: AgentConfig) -> str | None:
    """The chat template a run with ``cfg`` (``model.agent``) renders tool exchanges with (None: the tokenizer's
    own), checked, with the response parser of its calls set on ``tokenizer`` (see the module docstring). A
    ConfigError line naming ``agent.chat_template`` (and ``agent.call_format`` where that is the fix) otherwise."""
    template = load_template(cfg)
    check_renders_tools(tokenizer, template, cfg.chat_template)
    ensure_response_parser(tokenizer, template, cfg.chat_template, cfg.call_format)
    if keeps_prefix(tokenizer, template):
        return template
    swapped = swap_for(tokenizer, template)
    if swapped is None or not keeps_prefix(tokenizer, swapped):
        raise ConfigError(
            f"agent.chat_template={cfg.chat_template!r}: {template_name(cfg.chat_template)} renders the turns before "
            "a tool result differently once the result follows (not prefix-preserving), so the result's tokens "
            f"cannot be appended to the completion; {_FIX}"
        )
    return swapped


def check_tool_template(tokenizer: PreTrainedTokenizerBase, template: str | None, setting: str | None = None) -> None:
    """A ConfigError naming ``agent.chat_template`` and the template unless it renders a tool exchange
    (:func:`check_renders_tools`) and keeps the prefix (:func:`keeps_prefix`), as it is (no swap)."""
    check_renders_tools(tokenizer, template, setting)
    if not keeps_prefix(tokenizer, template):
        raise ConfigError(
            f"agent.chat_template={setting!r}: {template_name(setting)} renders the turns before a tool result "
            "differently once the result follows (not prefix-preserving), so the result's tokens cannot be appended "
            f"to the completion; {_FIX}"
        )


def check_renders_tools(tokenizer: PreTrainedTokenizerBase, template: str | None, setting: str | None = None) -> None:
    """A ConfigError naming ``agent.chat_template`` and the template unless it renders user -> assistant with a
    tool call -> tool result with the call's name, argument and the result in the text (TRL's
    ``supports_tool_calling``)."""
    where = f"agent.chat_template={setting!r}: {template_name(setting)}"
    if template is None and not tokenizer.chat_template:
        raise ConfigError(f"{where} does not exist (the tokenizer has none); {_FIX}")
    name, key, value, content = _PROBE
    tool = {"role": "tool", "name": name, "content": content}
    try:
        try:
            text = _render(tokenizer, [*_dummy_call(name, {key: value}), tool], template, tokenize=False)
        except TypeError:  # a template that takes string arguments only (TRL retries the same way)
            text = _render(tokenizer, [*_dummy_call(name, f'{{"{key}": "{value}"}}'), tool], template, tokenize=False)
    except TemplateError as err:
        raise ConfigError(f"{where} fails on a tool exchange ({err}); {_FIX}") from err
    dropped = [
        part for part, probe in zip(("name", "argument", "value", "result"), _PROBE, strict=True) if probe not in text
    ]
    if dropped:
        raise ConfigError(f"{where} drops the tool call's or result's {', '.join(dropped)}; {_FIX}")


def keeps_prefix(tokenizer: PreTrainedTokenizerBase, template: str | None) -> bool:
    """Whether ``template`` renders a tool-calling turn as the same ids once a tool result and the generation prompt
    follow (TRL's ``is_chat_template_prefix_preserving``): the tool-result ids are cut from that difference."""
    before = _render(tokenizer, _dummy_call("dummy", {}), template, tokenize=True, return_dict=False)
    after = _render(
        tokenizer,
        [*_dummy_call("dummy", {}), {"role": "tool", "name": "dummy", "content": "dummy"}],
        template,
        tokenize=True,
        return_dict=False,
        add_generation_prompt=True,
    )
    return after[: len(before)] == before


def ensure_response_parser(
    tokenizer: PreTrainedTokenizerBase,
    template: str | None,
    setting: str | None = None,
    call_format: str | None = None,
) -> None:
    """Sets ``tokenizer.response_template`` to the parser of the call format ``call_format`` names, else of the one
    ``template`` (None: the tokenizer's own) renders (:func:`~infgrpo.agent.formats.recognise`); one already set is
    kept, as in TRL. A ConfigError naming ``agent.chat_template`` and ``agent.call_format`` when no format is named
    and the template renders none; an InfgrpoWarning when the named one is not the one the template renders."""
    if getattr(tokenizer, "response_template", None) is not None:
        return
    found = recognise(tokenizer, template)
    if call_format is not None:
        if found is not None and found.name != call_format:
            warnings.warn(
                f"[infgrpo] agent.call_format={call_format!r}, but {template_name(setting)} writes tool calls in the "
                f"{found.name!r} format: the model's calls are read as {call_format!r} calls",
                InfgrpoWarning,
                stacklevel=3,
            )
        tokenizer.response_template = FORMATS[call_format].parser()
        return
    if found is None:
        raise ConfigError(
            f"agent.chat_template={setting!r}: {template_name(setting)} writes tool calls in a form infgrpo does not "
            f"recognise (it reads {', '.join(f.name for f in CALL_FORMATS)}); name the form the model writes with "
            "agent.call_format, set tokenizer.response_template (transformers' response parsing), or pass "
            "agent.chat_template: compact"
        )
    tokenizer.response_template = found.parser()


def render_prompt(
    tokenizer: PreTrainedTokenizerBase,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    template: str | None,
    kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """The prompt ids of ``messages`` with the tool schemas ``tools`` and the generation prompt (TRL's rendering;
    no tools render as None: some templates write tool boilerplate for an empty list)."""
    out = _render(
        tokenizer,
        messages,
        template,
        tools=tools or None,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        **(kwargs or {}),
    )
    return list(out["input_ids"])


def parse_turn(
    tokenizer: PreTrainedTokenizerBase, turn_ids: list[int], prefix_ids: list[int], tools: list[dict[str, Any]]
) -> dict[str, Any]:
    """One model turn as an assistant message (TRL's ``parse_response``): the tokenizer's response template reads
    ``turn_ids`` after ``prefix_ids`` (all ids before the turn, ending at the assistant header), tool arguments
    cast by the ``tools`` schemas. Content loses a trailing EOS and is never None; a call needs a string name and
    gets ``{}`` for missing arguments. A turn that does not parse (malformed JSON in a call, nothing left) becomes
    its decoded text, special tokens skipped, with no tool calls."""
    try:
        parsed = tokenizer.parse_response(turn_ids, prefix=prefix_ids, tools=tools)
        if parsed is None:
            raise ValueError("nothing parsed")
        if isinstance(parsed.get("content"), str):
            parsed["content"] = parsed["content"].removesuffix(tokenizer.eos_token)
        if not parsed.get("content"):
            parsed["content"] = ""
        if "tool_calls" in parsed:
            _check_calls(parsed["tool_calls"])
    except (ValueError, TypeError):
        parsed = {"role": "assistant", "content": tokenizer.decode(turn_ids, skip_special_tokens=True)}
    return parsed


def _check_calls(calls: Any) -> None:
    """A ValueError unless ``calls`` is None or a list of calls with a string name; missing arguments become
    ``{}`` (TRL's ``_validate_tool_calls``, for ``{"type", "function": {...}}`` and flat calls alike)."""
    if calls is None:
        return
    if not isinstance(calls, list):
        raise ValueError("tool_calls must be a list")
    for call in calls:
        if not isinstance(call, dict):
            raise ValueError("a tool call must be a dict")
        target = call["function"] if "function" in call else call
        if not isinstance(target, dict) or not isinstance(target.get("name"), str):
            raise ValueError("a tool call needs a string name")
        if target.get("arguments") is None:
            target["arguments"] = {}


def tool_suffix_ids(
    tokenizer: PreTrainedTokenizerBase,
    tool_messages: list[dict[str, Any]],
    template: str | None,
    kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """The ids that follow a model turn ending in tool calls (TRL's ``_get_tool_suffix_ids``): ``tool_messages``
    (one turn's results) and the next generation prompt, as the difference between a dummy call rendered without
    them and with them. The cut is after the dummy's last EOS, so the template's text after the model's
    end-of-turn token (ChatML's newline) opens the suffix."""
    kwargs = kwargs or {}
    dummy = _dummy_call(tool_messages[0]["name"], {})  # the real name: some templates head a result by its call
    prefix = _render(
        tokenizer, dummy, template, add_generation_prompt=False, tokenize=True, return_dict=False, **kwargs
    )
    full = _render(
        tokenizer,
        [*dummy, *tool_messages],
        template,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
        **kwargs,
    )
    ends = [k for k, token in enumerate(prefix) if token == tokenizer.eos_token_id]
    if ends:
        prefix = prefix[: ends[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template renders the turns before a tool result differently once it follows")
    return list(full[len(prefix) :])
