"""Prompts with images, rendered by the model's processor as TRL renders them: ids, and the vision inputs per prompt.

    processor = image_processor_for(rows, "tiny-vl", None, "train")      # None for text-only rows; ConfigError if unfit
    messages, images = image_prompt(row, row["prompt"], "train", 0, root)  # TRL's rewrite: image blocks hold the images
    ids, vision = encode_image_prompt(processor, messages, None, {})      # prompt ids, VisionInputs
    ids, vision = encode_image_prompt(processor, messages, None, {}, tools=schemas, template=agent_template)

TRL 1.16 renders a batch of image prompts with ``processor.apply_chat_template(conversation, add_generation_prompt=True,
tokenize=True, return_dict=True, **chat_template_kwargs)``; :func:`encode_image_prompt` makes the same call for one
prompt (a system prompt, when set and the conversation has none, goes first as for text prompts); with tools
(``model.agent``) it passes ``tools=`` and the agent's ``chat_template=`` as TRL does for a VLM with tools, so the
tool schemas are rendered around the images by the processor. What cannot work is
refused in one line, before the model loads on the command line (the first rows) and as the data module sets up:
images with a text-only model, a string prompt with images (TRL refuses it at the first batch), a chat template that
does not write the processor's image token for an image block, and prompts whose image tokens pass
``data.max_prompt_length`` (:func:`too_long_message` names ``data.processor_kwargs``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infgrpo.data.conversation import Prompt
from infgrpo.data.images import image_column, inject_images, row_images
from infgrpo.settings import ConfigError
from infgrpo.vision.inputs import VisionInputs
from infgrpo.vision.processor import load_processor


def rows_with_images(rows: list[dict[str, Any]]) -> bool:
    """Whether the rows have an image column (TRL's ``image`` or ``images``) holding an image in some row."""
    return any(image_column(r) is not None and r[image_column(r)] not in (None, []) for r in rows)


def image_processor_for(
    rows: list[dict[str, Any]],
    model: str,
    processor_kwargs: dict[str, Any] | None,
    split: str,
    template: str | None = None,
) -> Any | None:
    """The processor of ``model`` when ``rows`` hold images (None when they hold none); a ConfigError naming the model
    when it has no image processor (a text-only model), or naming the chat template (``template``: the agent's, None:
    the model's) when it cannot place an image."""
    if not rows_with_images(rows):
        return None
    processor = load_processor(model, processor_kwargs)
    if processor is None:
        column = next(image_column(r) for r in rows if image_column(r) is not None)
        raise ConfigError(
            f"the rows of split {split!r} hold images (column {column!r}), but data.tokenizer={model!r} (the model) is "
            "a text-only model, with no image processor; use an image-text-to-text model (e.g. tiny-vl), or drop the "
            "image column"
        )
    check_image_template(processor, model, template)
    return processor


def check_image_template(processor: Any, model: str, template: str | None = None) -> None:
    """A ConfigError naming the chat template (``template``, the agent's: ``model.agent.chat_template``; None: the
    model's) unless it writes the processor's image token for one image block (a text-only template prints the block
    itself, or nothing)."""
    probe = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "?"}]}]
    which = f"the chat template of {model!r}" if template is None else "model.agent.chat_template (the agent's)"
    fix = "" if template is None else "; give one that renders tool calls and image blocks, or leave it unset"
    try:
        text = processor.apply_chat_template(probe, add_generation_prompt=True, tokenize=False, chat_template=template)
    except Exception as err:  # noqa: BLE001 - a template error is the user's to read, in one line
        raise ConfigError(
            f"{which} cannot render an image block ({type(err).__name__}: {err}); the prompts hold images, so the "
            f"template must write the processor's image token for {{'type': 'image'}}{fix}"
        ) from err
    if text.count(processor.image_token) != 1:
        raise ConfigError(
            f"{which} does not place an image: for one {{'type': 'image'}} block it wrote "
            f"{text.count(processor.image_token)} {processor.image_token!r} tokens (want 1); give the model a "
            f"template that renders content blocks, as its hub processor's does{fix}"
        )


def image_prompt(
    row: dict[str, Any], prompt: Prompt, split: str, index: int, root: Path | None
) -> tuple[list[dict[str, Any]], list[Any] | None]:
    """(the prompt rewritten as TRL rewrites it, its images) of a row; the prompt unchanged and None for a row
    without images. A ConfigError for a string prompt with images (TRL's rule) or a bad image value."""
    images = row_images(row, split, index, root)
    if images is None:
        return prompt, None
    if isinstance(prompt, str):
        raise ConfigError(
            f"row {index} of split {split!r} has images but a string prompt; images need a conversational prompt (a "
            "list of {role, content} messages: TRL's rule), e.g. [{role: user, content: 'What is shown?'}]; give "
            "the messages, not text a chat template already rendered"
        )
    return inject_images(prompt, images), images


def encode_image_prompt(
    processor: Any,
    messages: list[dict[str, Any]],
    system_prompt: str | None,
    chat_template_kwargs: dict[str, Any] | None,
    tools: list[dict[str, Any]] | None = None,
    template: str | None = None,
) -> tuple[list[int], VisionInputs]:
    """The prompt ids and vision inputs of one conversation whose blocks hold its images (module docstring), with
    the tool schemas ``tools`` through the chat ``template`` (the agent's; None: the processor's) when given."""
    if system_prompt and messages[0].get("role") != "system":
        messages = [{"role": "system", "content": [{"type": "text", "text": system_prompt}]}, *messages]
    out = processor.apply_chat_template(
        messages, tools=tools or None, chat_template=template, add_generation_prompt=True, tokenize=True,
        return_dict=True, return_tensors="pt", **(chat_template_kwargs or {}),
    )  # fmt: skip
    vision = VisionInputs.from_processor(out, processor.family, processor.image_token_id)
    return out["input_ids"][0].tolist(), vision


def too_long_message(split: str, count: int, total: int, row: int, tokens: int, image_tokens: int, limit: int) -> str:
    """The long-prompt message when the longest prompt holds images: it says what the images take, and names
    ``data.processor_kwargs`` (the pixel settings) beside ``data.max_prompt_length``."""
    return (
        f"{count} of {total} prompts of split {split!r} are longer than data.max_prompt_length={limit} tokens (e.g. "
        f"row {row}: {tokens} tokens, {image_tokens} of them for its images); lower the images' pixels with "
        "data.processor_kwargs (e.g. {max_pixels: ...} for Qwen-VL, {size: {longest_edge: ...}} for SmolVLM), raise "
        "data.max_prompt_length, or set data.long_prompts: skip"
    )


def first_rows_image_tokens(
    hp: dict[str, Any],
    split: str,
    rows: list[dict[str, Any]],
    prompts: list[Prompt],
    root: Path | None,
    tools: list[list[dict[str, Any]] | None] | None = None,
    template: str | None = None,
) -> list[tuple[int, int] | None] | None:
    """(prompt tokens, image tokens) of each first row with images, rendered by the processor (None for a row
    without), or None when no row holds images: the command line's check before the model loads, with the data
    module's rules (the refusals of the module docstring). ``tools``: each row's tool schemas, rendered through the
    agent's ``template`` (``model.agent``), as the data module then renders them."""
    if not rows_with_images(rows):
        return None
    processor = image_processor_for(rows, hp["tokenizer"], hp.get("processor_kwargs"), split, template)
    out: list[tuple[int, int] | None] = []
    for i, (row, prompt) in enumerate(zip(rows, prompts, strict=True)):
        messages, images = image_prompt(row, prompt, split, i, root)
        if not images:
            out.append(None)
            continue
        schemas = tools[i] if tools is not None else None
        ids, vision = encode_image_prompt(
            processor, messages, hp.get("system_prompt"), hp.get("chat_template_kwargs"), schemas, template
        )
        out.append((len(ids), vision.image_tokens))
    return out
