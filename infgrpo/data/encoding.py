"""A split's rows made items: each prompt rendered and tokenized, and measured against ``data.max_prompt_length``.

    items = encode_rows(load_tokenizer("tiny"), [{"prompt": "12+3="}], "train", data.hparams, data.prompt_format)
    items[0]   # {"prompt_ids": [...], "prompt": "12+3=", "prompt_text": "12+3=", "meta": {"prompt": "12+3="}}

A row's prompt comes from :func:`~infgrpo.data.prompt_rows.row_prompt` (the prompt column, ``prompt_template``,
``as_conversation``); it is rendered by the :class:`~infgrpo.data.conversation.PromptFormat` (with the row's tool
schemas when the agent's rollout set them), or, with the model's processor and a row that holds images, by
:mod:`infgrpo.data.vision_prompts` (with the tool schemas too). A prompt longer than ``max_prompt_length`` is never
truncated: ``long_prompts`` says whether it stops the run (one line naming the split, the count and an example row) or
is dropped with a note.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from transformers import PreTrainedTokenizerBase

from infgrpo.data.conversation import PromptFormat, last_user_text
from infgrpo.data.images import image_root
from infgrpo.data.prompt_rows import row_prompt
from infgrpo.data.template_options import check_template_kwargs
from infgrpo.data.vision_prompts import encode_image_prompt, image_prompt, too_long_message
from infgrpo.settings import ConfigError

Tools = tuple[Callable[[dict], list[dict]], str | None]
"""The agent's rendering: each row's tool schemas, and the chat template (None: the tokenizer's)."""


def encode_rows(
    tokenizer: PreTrainedTokenizerBase,
    rows: list[dict],
    split: str,
    hp: Mapping[str, Any],
    fmt: PromptFormat,
    processor: Any = None,
    tools: Tools | None = None,
) -> list[dict]:
    """The items of ``rows`` (``{"prompt_ids", "prompt", "prompt_text", "meta"}``, with ``images`` and
    ``image_tokens`` for a row with images), under the data settings ``hp``; the rows whose prompt is too long are
    an error or dropped (``long_prompts``)."""
    if hp["system_prompt"] and not (hp["chat_template"] and tokenizer.chat_template):
        why = "data.chat_template is false" if not hp["chat_template"] else "the tokenizer has no chat template"
        raise ValueError(
            f"data.system_prompt={hp['system_prompt'][:40]!r} is set but {why}, so there is no system message "
            "to put it in; drop it, or put the instructions into data.prompt_template"
        )
    items, too_long = [], []
    kwargs = hp.get("chat_template_kwargs")
    check_template_kwargs(tokenizer, kwargs)
    for i, row in enumerate(rows):
        row, prompt = row_prompt(row, hp, split, i)
        if isinstance(prompt, list) and not hp["chat_template"]:
            raise ConfigError(
                f"data.chat_template is false, but row {i} of split {split!r} is a conversation (chat messages "
                f"in data.prompt_column={hp['prompt_column']!r}), which only the chat template can render"
            )
        item, images = {"prompt": prompt, "prompt_text": last_user_text(prompt), "meta": row}, None
        schemas, template = (tools[0](row), tools[1]) if tools is not None else (None, None)
        if processor is not None:  # vision hook: TRL's rewrite, rendered by the processor
            item["prompt"], images = image_prompt(row, prompt, split, i, image_root(hp["path"]))
        if processor is not None and images:
            ids, vision = encode_image_prompt(processor, item["prompt"], hp["system_prompt"], kwargs, schemas, template)
            item |= {"images": images, "image_tokens": vision.image_tokens, "conversation": prompt}
        else:
            ids = fmt.encode(tokenizer, prompt, schemas, template)
        if len(ids) > hp["max_prompt_length"]:
            too_long.append((i, len(ids), item.get("image_tokens", 0)))
            continue
        items.append({"prompt_ids": ids, **item})
    if too_long:
        handle_too_long(too_long, len(rows), bool(items), split, hp)
    return items


def handle_too_long(too_long: list[tuple[int, int, int]], rows: int, kept: bool, split: str, hp: Mapping) -> None:
    """Raises for the prompts of ``split`` that are too long (``too_long``: (row, tokens, image tokens) each, of
    ``rows``) under ``long_prompts: error``, or when skipping them leaves none (``kept`` false); otherwise prints
    what is skipped."""
    i, n, image_tokens = too_long[0]
    limit = hp["max_prompt_length"]
    msg = (
        f"{len(too_long)} of {rows} prompts of split {split!r} are longer than "
        f"data.max_prompt_length={limit} tokens (e.g. row {i}: {n} tokens)"
    )
    if image_tokens and hp["long_prompts"] == "error":
        raise ValueError(too_long_message(split, len(too_long), rows, i, n, image_tokens, limit))
    if hp["long_prompts"] == "error":
        raise ValueError(msg + "; raise max_prompt_length or set data.long_prompts: skip")
    if not kept:
        shortest = min(n for _, n, _ in too_long)
        raise ConfigError(
            f"data.long_prompts='skip' drops every prompt of split {split!r}: all {rows} are longer "
            f"than data.max_prompt_length={limit} tokens (the shortest has {shortest}); "
            f"raise data.max_prompt_length to >= {shortest}"
        )
    print(f"[infgrpo] skipping: {msg}")
