"""TRL 1.16's own tool code on a minimal stand-in trainer: prompt ids, tool-result ids and the tool loop."""

import inspect
import sys
from types import SimpleNamespace

from trl.trainer.grpo_trainer import GRPOTrainer


def stand_in(tokenizer, template, kwargs=None, tools=(), **more):
    """The attributes of a GRPOTrainer that its tool methods read, for a tokenizer (not a VLM processor)."""
    trainer = SimpleNamespace(
        processing_class=tokenizer, _tokenizer=tokenizer, _is_vlm=False, chat_template=template,
        chat_template_kwargs=kwargs or {}, tools=list(tools), environment_factories=None, use_vllm=False,
        max_tool_calling_iterations=sys.maxsize,
    )  # fmt: skip
    for name, value in more.items():
        setattr(trainer, name, value)
    return trainer


def trl_prompt_ids(tokenizer, template, prompts, tools, kwargs=None):
    """``GRPOTrainer._tokenize_prompts``: a batch rendered with the standalone tools."""
    return GRPOTrainer._tokenize_prompts(stand_in(tokenizer, template, kwargs, tools), prompts)[0]


def trl_env_prompt_ids(tokenizer, template, prompts, env_tools, kwargs=None):
    """``GRPOTrainer._tokenize_prompts`` with environments: each prompt with its own tools (``env_tools[i]``)."""
    names = list(range(len(prompts)))
    trainer = stand_in(
        tokenizer, template, kwargs, environment_factories={}, _batch_environments=names,
        _env_tools=dict(zip(names, env_tools, strict=True)),
    )  # fmt: skip
    return GRPOTrainer._tokenize_prompts(trainer, prompts)[0]


def trl_suffix_ids(tokenizer, template, tool_messages, kwargs=None):
    """``GRPOTrainer._get_tool_suffix_ids`` of one turn's tool messages."""
    return GRPOTrainer._get_tool_suffix_ids(stand_in(tokenizer, template, kwargs), tool_messages)


def trl_tool_loop(tokenizer, template, tools, prompt_ids, first_turns, post_turns, loop, **limits):
    """``GRPOTrainer._tool_call_loop`` on one sample per prompt: ``first_turns[i]`` are sample i's first ids,
    ``post_turns[i]`` the ids its model "generates" after each tool round (popped in order; [] when none left).
    ``limits``: ``max_tool_calling_iterations``, ``max_completion_length``, ``max_position_embeddings``.
    Returns (tool_mask, completions, completion_ids, calls, failures) as TRL computes them."""
    from trl.chat_template_utils import parse_response

    queued = [list(turns) for turns in post_turns]
    context = limits.get("max_position_embeddings", 10**6)

    def generate(ids, images, fields, num_generations, has_tool_images):
        rows = [next(i for i, p in enumerate(prompt_ids) if pct[: len(p)] == p) for pct in ids]
        return [queued[i].pop(0) if queued[i] else [] for i in rows], None

    sync = {t.__name__: t for t in tools if not inspect.iscoroutinefunction(t)}
    asynchronous = {t.__name__: t for t in tools if inspect.iscoroutinefunction(t)}
    trainer = stand_in(
        tokenizer, template, None, tools, _sync_tool_dicts=[sync] * len(prompt_ids),
        _async_tool_dicts=[asynchronous] * len(prompt_ids), async_loop=loop, _generate_single_turn=generate,
        max_tool_calling_iterations=limits.get("max_tool_calling_iterations", sys.maxsize),
        max_completion_length=limits.get("max_completion_length", 10**6),
        model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=context)),
    )  # fmt: skip
    trainer._get_tool_suffix_ids = lambda messages: GRPOTrainer._get_tool_suffix_ids(trainer, messages)
    prompts = [[{"role": "user", "content": "?"}] for _ in prompt_ids]
    completions = [
        [parse_response(tokenizer, ids, prefix=p, tools=tools)] for ids, p in zip(first_turns, prompt_ids, strict=True)
    ]
    out = GRPOTrainer._tool_call_loop(
        trainer, prompts, prompt_ids, [list(t) for t in first_turns], completions, None, None, {}
    )
    tool_mask, completions, completion_ids, _, calls, failures, _ = out
    return tool_mask, completions, completion_ids, calls, failures


def trl_tool_setup(tokenizer):
    """``GRPOTrainer.__init__``'s set-up for ``tools=``, on ``tokenizer``: a ValueError unless its template renders a
    tool exchange; the response template of a stock template it knows (kept when one is set, a ValueError for any
    other template); the chat template it renders with: its training template when the tokenizer's does not keep the
    prefix, else None (the tokenizer's own)."""
    from trl.chat_template_utils import (
        add_response_schema,
        get_training_chat_template,
        is_chat_template_prefix_preserving,
        supports_tool_calling,
    )

    if not supports_tool_calling(tokenizer):
        raise ValueError("The provided chat template does not support tool calling.")
    if getattr(tokenizer, "response_template", None) is None:
        add_response_schema(tokenizer)
    return None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)
