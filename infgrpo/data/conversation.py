"""Prompts in TRL's formats: a *conversational* prompt (a list of chat messages) or a *standard* one (a string).

    check_messages(row["prompt"], "prompt", "train", 3)         # ConfigError naming the row, unless valid messages
    ids = encode_prompt(tokenizer, [{"role": "user", "content": "2+2?"}], None, True, {"enable_thinking": False})
    ids = encode_prompt(tokenizer, "2+2?", "Answer briefly.", True)   # wrapped: system + user turn
    ids = encode_prompt(tokenizer, "2+2?", None, True, tools=[add_schema], template=None)  # with tool schemas
    ids = PromptFormat("Answer briefly.", True).encode(tokenizer, "2+2?")  # a data module's settings, in one object

TRL 1.16's rules (``trl.data_utils.is_conversational``), which hub datasets made for GRPO follow: a row is
conversational when its prompt is a list of ``{"role", "content"}`` messages (system messages and earlier turns
included). Such a prompt goes through the tokenizer's chat template with ``add_generation_prompt=True`` and the
template options of ``data.chat_template_kwargs`` (e.g. Qwen3's ``enable_thinking``), giving the token ids TRL's
``GRPOTrainer`` gives (tested against it).

A standard prompt (a string) is wrapped in the chat template as one user turn after ``data.system_prompt`` when
``data.chat_template`` is true (infgrpo's default). TRL tokenizes a string prompt as it is (the tokenizer's call,
its special tokens added), which ``data.chat_template: "conversations"`` does while conversational prompts still
go through the template (what ``python -m infgrpo.from_trl`` writes), and ``false`` does for string-only data.
With ``true``, a string that already holds the chat template's markup (a special token the template writes, e.g.
``<|im_start|>``) is **never wrapped a second time**: it is tokenized as it is, without special tokens added (the
markup holds them), and a note says so once.

With tools (``model.agent``), the tool schemas are rendered into the prompt by the chat template (``tools=``, and
``template``: the agent's chat template, None for the tokenizer's), as TRL 1.16's ``GRPOTrainer`` renders them; a
string prompt is then always wrapped as one user turn (a tool schema needs the template). This is the one prompt
encoder: the data module measures the prompts it yields (``data.max_prompt_length``, the context checks) with the
same tools the rollout renders them with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase

from infgrpo.settings import ConfigError

ROLES = ("system", "user", "assistant", "tool", "developer")
"""Message roles a conversational prompt may hold (TRL's chat formats, tool turns included)."""

Prompt = str | list[dict[str, Any]]
"""A prompt as a dataset gives it: a string (standard) or a list of chat messages (conversational)."""

_MARKUP: dict[int, tuple[str, ...]] = {}  # id(tokenizer) -> the special tokens its chat template writes
_NOTED: set[int] = set()  # tokenizers whose templated string prompts were already noted


def is_conversational(prompt: Any) -> bool:
    """Whether ``prompt`` is a list of chat messages (TRL's rule: a list whose first item is a dict with a role)."""
    return isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], dict) and "role" in prompt[0]


def check_messages(prompt: Any, column: str, split: str, row: int) -> None:
    """A ConfigError naming ``data.prompt_column``, the split and the 0-based row unless ``prompt`` is a non-empty
    list of messages, each a mapping with a known ``role`` and a string ``content``."""
    where = f"row {row} of split {split!r} (data.prompt_column={column!r})"
    if not isinstance(prompt, list) or not prompt:
        raise ConfigError(f"{where} is an empty list of messages; a conversational prompt needs at least one message")
    for i, message in enumerate(prompt):
        if not isinstance(message, dict):
            raise ConfigError(f"{where}: message {i} is a {type(message).__name__}, not a {{role, content}} mapping")
        if message.get("role") not in ROLES:
            raise ConfigError(f"{where}: message {i} has role {message.get('role')!r}; valid roles: {', '.join(ROLES)}")
        if not isinstance(message.get("content"), str):
            got = "no content" if message.get("content") is None else f"content of type {type(message['content'])}"
            raise ConfigError(f"{where}: message {i} ({message['role']}) has {got}; each needs a string content")


def last_user_text(prompt: Prompt) -> str:
    """What a table shows of a prompt: the string itself, or the content of a conversation's last user message."""
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if m.get("role") == "user"]
    return users[-1] if users else str(prompt[-1].get("content", ""))


def template_markup(tokenizer: PreTrainedTokenizerBase) -> tuple[str, ...]:
    """The special tokens the tokenizer's chat template writes around a message (e.g. ``<|im_start|>``), found by
    rendering a one-message conversation; () without a chat template. Cached per tokenizer."""
    key = id(tokenizer)
    if key not in _MARKUP:
        markup: tuple[str, ...] = ()
        if tokenizer.chat_template:
            probe = tokenizer.apply_chat_template(
                [{"role": "user", "content": "\x00"}], tokenize=False, add_generation_prompt=True
            )
            added = [t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values()]
            candidates = set(tokenizer.all_special_tokens) | {t for t in added if _looks_like_markup(t)}
            markup = tuple(sorted(t for t in candidates if t and t in probe))
        _MARKUP[key] = markup
    return _MARKUP[key]


def _looks_like_markup(token: str) -> bool:
    """``<|im_start|>``, ``<start_of_turn>``, ``[INST]``: not a word the vocabulary added (``user``)."""
    return (token.startswith("<") and token.endswith(">")) or (token.startswith("[") and token.endswith("]"))


def holds_template(tokenizer: PreTrainedTokenizerBase, text: str) -> bool:
    """Whether the string prompt ``text`` already holds the chat template's markup (it was templated before)."""
    return any(token in text for token in template_markup(tokenizer))


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase,
    prompt: Prompt,
    system_prompt: str | None,
    chat_template: bool | str,
    chat_template_kwargs: dict[str, Any] | None = None,
    *,
    tools: list[dict[str, Any]] | None = None,
    template: str | None = None,
) -> list[int]:
    """Token ids of a prompt (see the module docstring): a conversation through the chat template (``system_prompt``
    put first when it has no system message), a templated string as it is, a plain string wrapped when
    ``chat_template`` is true and the tokenizer has a template, else tokenized alone (``"conversations"``: TRL's
    rule, no system message for it). ``tools``: the tool schemas the template renders (a string prompt is then
    wrapped whatever ``chat_template`` says); ``template``: the chat template to render with (None: the
    tokenizer's)."""
    kwargs = {**(chat_template_kwargs or {}), "chat_template": template}
    if tools is not None:
        kwargs["tools"] = tools or None  # no tools render as None: some templates write boilerplate for []
    if isinstance(prompt, list) or (tools is not None and not holds_template(tokenizer, prompt)):
        if not tokenizer.chat_template and template is None:
            raise ConfigError(
                "the data's prompts are conversations (lists of chat messages), and the tokenizer has no chat "
                "template to render them; use a model with one, or give string prompts"
            )
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        if system_prompt and messages[0].get("role") != "system":
            messages = [{"role": "system", "content": system_prompt}, *messages]
        out = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, **kwargs
        )
        return list(out["input_ids"])
    if chat_template == "conversations" and system_prompt:
        raise ConfigError(
            f"data.system_prompt={system_prompt[:40]!r} is set, but data.chat_template: conversations tokenizes string "
            "prompts as they are (TRL's rule), so there is no system message to put it in; set data.chat_template: "
            "true to wrap them after the system prompt, or drop data.system_prompt"
        )
    if chat_template and chat_template != "conversations" and tokenizer.chat_template:
        if holds_template(tokenizer, prompt):
            if system_prompt:
                raise ConfigError(
                    f"data.system_prompt={system_prompt[:40]!r} is set, but the string prompts already hold the chat "
                    f"template's markup ({', '.join(template_markup(tokenizer))}), so no system message can be put "
                    "in; drop data.system_prompt, or give the prompts untemplated"
                )
            if id(tokenizer) not in _NOTED:
                _NOTED.add(id(tokenizer))
                print(
                    "[infgrpo] the string prompts already hold the chat template's markup "
                    f"({', '.join(template_markup(tokenizer))}): tokenized as they are, not wrapped a second time"
                )
            return tokenizer(prompt, add_special_tokens=False)["input_ids"]
        messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
            {"role": "user", "content": prompt}
        ]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer(prompt)["input_ids"]


@dataclass(frozen=True)
class PromptFormat:
    """How a data module renders its prompts (``data.system_prompt``, ``data.chat_template``,
    ``data.chat_template_kwargs``), in one object: what else renders a prompt (the agent's rollout, with its tool
    schemas) asks it, so the rule is the data module's whoever renders."""

    system_prompt: str | None = None
    chat_template: bool | str = True
    chat_template_kwargs: dict[str, Any] | None = None

    def encode(
        self,
        tokenizer: PreTrainedTokenizerBase,
        prompt: Prompt,
        tools: list[dict[str, Any]] | None = None,
        template: str | None = None,
    ) -> list[int]:
        """:func:`encode_prompt` of ``prompt`` with these settings (``tools``, ``template``: as there)."""
        return encode_prompt(
            tokenizer, prompt, self.system_prompt, self.chat_template, self.chat_template_kwargs,
            tools=tools, template=template,
        )  # fmt: skip
