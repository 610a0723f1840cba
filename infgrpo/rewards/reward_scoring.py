"""How a sequence-classification reward model scores prompts and completions: TRL's text of each row, scored in
micro-batches of at most a token budget.

    texts = reward_texts(prompts, completions, tokenizer)            # TRL's text of each row
    scores = score_texts(model, tokenizer, texts, token_budget=4096)  # logits[:, 0] of each, micro-batched

The text of a row is ``prompt + completion`` for standard rows, and the tokenizer's chat template over the prompt's
messages + the completion's (``tokenize=False``, with ``chat_template_kwargs``) for conversational rows (TRL 1.16).
Texts are tokenized with ``add_special_tokens=False`` and right padding, rows of similar lengths together
(:func:`micro_batches`), so the model's activations stay the same size whatever the number of completions (TRL
scores all B x G completions in one padded batch); the score is ``logits[:, 0]``, under ``torch.inference_mode()``.
:class:`~infgrpo.rewards.reward_model.RewardModel` loads a model and its tokenizer and calls these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from infgrpo.runtime.packing import pack_longest_first

Message = Mapping[str, Any]
"""One chat message: ``{"role": ..., "content": ...}``."""
Prompt = str | Sequence[Message]
"""A standard prompt (text) or a conversational one (messages)."""
Completion = str | Sequence[Message]
"""A completion: text, or messages (TRL: ``[{"role": "assistant", "content": text}]``)."""


def _is_messages(value: object) -> bool:
    """True for a non-empty list of dicts with a ``role`` (TRL's test of a conversational row, on its prompt)."""
    return isinstance(value, Sequence) and not isinstance(value, str) and bool(value) and _is_message(value[0])


def _is_message(value: object) -> bool:
    return isinstance(value, Mapping) and "role" in value


def reward_texts(
    prompts: Sequence[Prompt],
    completions: Sequence[Completion],
    tokenizer: PreTrainedTokenizerBase,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[str]:
    """The text the reward model scores for each (prompt, completion) pair, by TRL's rule.

    Standard rows (``prompts[0]`` is a string): ``prompt + completion``. Conversational rows (``prompts[0]``
    is a list of ``{"role", "content"}`` messages): ``tokenizer.apply_chat_template(prompt + completion,
    tokenize=False, **chat_template_kwargs)``, where a completion is a list of messages or a string (taken as
    ``[{"role": "assistant", "content": completion}]``, the form TRL gives it).

    Args:
        prompts: N prompts, all strings or all lists of messages.
        completions: N completions, one per prompt.
        tokenizer: the reward model's tokenizer (its chat template renders conversational rows).
        chat_template_kwargs: extra arguments of the chat template (e.g. ``{"enable_thinking": False}``).

    Returns:
        N strings, in the order of the rows.
    """
    if len(prompts) != len(completions):
        raise ValueError(f"reward model: {len(prompts)} prompts but {len(completions)} completions; one per prompt")
    if not prompts:
        return []
    if not _is_messages(prompts[0]):
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            if not isinstance(prompt, str) or not isinstance(completion, str):
                raise TypeError(
                    f"reward model: prompts[0] is a string (standard rows), so every prompt and completion must be "
                    f"a string; row {i} has a {type(prompt).__name__} prompt and a {type(completion).__name__} "
                    "completion"
                )
        return [prompt + completion for prompt, completion in zip(prompts, completions, strict=True)]
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"reward model: the rows are conversational (messages) but the reward tokenizer "
            f"{getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__!r} has no chat template"
        )
    kwargs = dict(chat_template_kwargs or {})
    texts = []
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        if not _is_messages(prompt):
            raise TypeError(
                f"reward model: prompts[0] is a list of messages (conversational rows), but prompts[{i}] is "
                f"{type(prompt).__name__}: {prompt!r:.80}"
            )
        if isinstance(completion, str):
            completion = [{"role": "assistant", "content": completion}]
        elif not (isinstance(completion, Sequence) and all(_is_message(m) for m in completion)):
            raise TypeError(
                f"reward model: completions[{i}] must be a string or a list of {{'role', 'content'}} messages, "
                f"not {completion!r:.80}"
            )
        texts.append(tokenizer.apply_chat_template([*prompt, *completion], tokenize=False, **kwargs))
    return texts


def check_token_budget(token_budget: int) -> int:
    """Validates a micro-batch's budget of padded tokens: an integer >= 1."""
    if isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 1:
        raise ValueError(
            f"reward model: token_budget={token_budget!r} is not valid; it is the most padded tokens "
            "(rows x longest row) a scoring micro-batch holds, an integer >= 1 (e.g. 4096)"
        )
    return token_budget


def micro_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Groups rows into micro-batches whose padded size (rows x longest row) stays within ``token_budget``.

    Rows are taken longest first (so a micro-batch's rows have similar lengths and little padding); a row
    longer than the budget forms a micro-batch alone (:func:`~infgrpo.runtime.packing.pack_longest_first`).

    Args:
        lengths: N row lengths, in tokens.
        token_budget: the most padded tokens in one micro-batch (>= 1).

    Returns:
        Lists of row indices (into ``lengths``); every index appears in exactly one.
    """
    return pack_longest_first(check_token_budget(token_budget), lengths)


def _model_device(model: torch.nn.Module) -> torch.device:
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    return next(model.parameters()).device


def score_texts(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], token_budget: int
) -> list[float]:
    """The reward model's score of each text, ``logits[:, 0]``, in micro-batches of at most ``token_budget`` tokens.

    Each micro-batch (see :func:`micro_batches`) is tokenized as TRL tokenizes its one batch
    (``padding=True, padding_side="right", add_special_tokens=False``) and run under ``torch.inference_mode()``
    on the model's device, so the activations hold at most about ``token_budget`` tokens (or one text longer
    than that) whatever ``len(texts)`` is.

    Args:
        model: a sequence-classification model; ``logits`` of shape (rows, num_labels), column 0 read.
        tokenizer: its tokenizer, with a pad token equal to the model's ``pad_token_id``.
        texts: N texts (see :func:`reward_texts`).
        token_budget: the most padded tokens (rows x longest row) in one micro-batch, >= 1.

    Returns:
        N floats, in the order of ``texts``.
    """
    check_token_budget(token_budget)
    if not texts:
        return []
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        raise ValueError(
            "reward model: the tokenizer has no pad token; set one (TRL uses tokenizer.pad_token = "
            "tokenizer.eos_token) and the model's config.pad_token_id to it, or use RewardModel, which does"
        )
    model_pad = getattr(model.config.get_text_config(), "pad_token_id", None)
    if model_pad is not None and model_pad != pad_id:
        raise ValueError(
            f"reward model: the model's pad_token_id is {model_pad} but the tokenizer pads with {pad_id}; the model "
            "reads its score at the last token that is not its pad token, so they must agree (RewardModel sets it)"
        )
    texts = list(texts)
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    device = _model_device(model)
    scores = [0.0] * len(texts)
    with torch.inference_mode():
        for batch in micro_batches(lengths, token_budget):
            inputs = tokenizer(
                [texts[i] for i in batch],
                return_tensors="pt",
                padding=True,
                padding_side="right",
                add_special_tokens=False,
            ).to(device)
            values = model(**inputs).logits[:, 0].float().tolist()  # (rows,)
            for i, value in zip(batch, values, strict=True):
                scores[i] = value
    return scores
