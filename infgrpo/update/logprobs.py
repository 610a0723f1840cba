"""Per-token log-probs of completions under a model, without a whole-batch float32 logits tensor.

Two paths, chosen by ``chunk_tokens`` (``GRPOModule.logit_chunk_tokens``):

- chunked (``chunk_tokens >= 1``, the default): the model's base (its decoder) gives final hidden
  states; only the real completion positions go through the LM head, ``chunk_tokens`` at a time,
  with recomputation in the backward (:mod:`infgrpo.update.chunked_head`). Extra memory:
  O(chunk x vocabulary).
- full (``chunk_tokens == 0``): the model's own forward returns logits for the last C + 1 positions
  of every row (``logits_to_keep``), up-cast to float32 8 rows at a time. Extra memory:
  O(rows x C x vocabulary), kept for the backward. The reference the chunked path is tested against.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from infgrpo.update.batching import MicroBatch
from infgrpo.update.chunked_head import (
    DEFAULT_LOGIT_CHUNK_TOKENS,
    chunked_logprobs,
    chunked_logprobs_and_entropy,
    head_terms,
)
from infgrpo.update.shared_prompt.batching import SharedMicroBatch
from infgrpo.update.shared_prompt.carry import PromptCarry
from infgrpo.update.shared_prompt.forward import shared_hidden, shared_logits
from infgrpo.vision.features import rows_inputs

UNSUPPORTED_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")
"""Config fields of models whose forward changes the logits after the LM head (Gemma 2/3 soft-capping,
Cohere's and Granite's scaling); the chunked path would compute other log-probs, so it refuses them."""


def causal_lm_parts(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """(decoder, head) of a Hugging Face causal LM, plain or peft-wrapped: the base model that returns
    ``last_hidden_state`` (n, T, H) and the output embedding (LoRA-adapted or not)."""
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, head = getattr(lm, "base_model", None), lm.get_output_embeddings()
    if decoder is None or decoder is lm or head is None:
        raise ValueError(
            f"logit_chunk_tokens: {type(lm).__name__} has no separate base model and output layer to take "
            "hidden states from; set logit_chunk_tokens: 0 to use full logits"
        )
    return decoder, head


def check_chunked_head(model: nn.Module, chunk_tokens: int) -> None:
    """Raises a ValueError naming ``logit_chunk_tokens`` when the chunked path cannot reproduce ``model``'s logits.

    Checked before training: the config has no logit transform after the head, the head is a linear
    layer :func:`head_terms` handles, and on a short input the chunked head's logits equal the
    model's own (so a model whose forward does something else to its logits is caught too).
    """
    if chunk_tokens == 0:
        return
    if not isinstance(chunk_tokens, int) or chunk_tokens < 0:
        raise ValueError(
            f"logit_chunk_tokens={chunk_tokens!r} must be an integer >= 1 (positions through the LM head at a "
            "time) or 0 (full logits)"
        )
    from infgrpo.sampler.model_support import text_config

    cfg = text_config(model.config)
    for name in UNSUPPORTED_LOGIT_TRANSFORMS:
        value = getattr(cfg, name, None)
        if value is not None and value != 1:
            raise ValueError(
                f"logit_chunk_tokens={chunk_tokens}: {type(model).__name__} sets {name}={value}, a transform of "
                "the logits after the LM head that the chunked path does not apply; set logit_chunk_tokens: 0 "
                "to use full logits"
            )
    decoder, head = causal_lm_parts(model)
    device = next(model.parameters()).device
    ids = torch.arange(1, 5, device=device)[None] % int(cfg.vocab_size)  # (1, 4)
    was_training = model.training
    model.eval()  # no dropout, so both paths see the same function
    try:
        with torch.no_grad():
            want = model(input_ids=ids, use_cache=False).logits[0]  # (4, V)
            hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state[0]  # (4, H)
            terms, bias = head_terms(head, hidden)
            got = sum(nn.functional.linear(x, w).to(want.dtype) for x, w in terms) + (0 if bias is None else bias)
    finally:
        model.train(was_training)
    tol = 64 * torch.finfo(want.dtype).eps * max(1.0, want.abs().max().item())
    err = (got - want).abs().max().item()
    if not err <= tol:
        raise ValueError(
            f"logit_chunk_tokens={chunk_tokens}: {type(model).__name__}'s logits are not its LM head applied to its "
            f"final hidden states (max difference {err:.3g} > {tol:.3g}); set logit_chunk_tokens: 0 to use full "
            "logits"
        )


def completion_logprobs(
    model: PreTrainedModel,
    mb: MicroBatch | SharedMicroBatch,
    temperature: float = 1.0,
    chunk_tokens: int = DEFAULT_LOGIT_CHUNK_TOKENS,
    entropy: bool = False,
    entropy_grad: bool = False,
    carry: PromptCarry | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Log-probs (n, C) of ``mb.completion_ids`` under ``model`` at ``temperature`` (and, with ``entropy``,
    the entropy (n, C) of each position's tempered distribution; differentiable on the chunked path, where an
    entropy nothing differentiates costs nothing in the backward, and on the full path with ``entropy_grad``).

    ``chunk_tokens``: positions through the LM head at a time (the chunked path), or 0 for the
    full-logits path (see the module docstring). A :class:`~infgrpo.update.shared_prompt.batching.SharedMicroBatch`
    runs each prompt once (:mod:`infgrpo.update.shared_prompt.forward`), and with ``carry`` once in a pass however many
    micro-batches its group spans (:mod:`infgrpo.update.shared_prompt.carry`). Positions after a row's completion
    (padding) hold 0 on the chunked path and the pad token's log-prob on the full path; both are masked
    in the loss.
    """
    if chunk_tokens == 0:
        return full_logits_logprobs(model, mb, temperature, entropy=entropy, entropy_grad=entropy_grad, carry=carry)
    decoder, head = causal_lm_parts(model)
    real = mb.generated  # (n, C): generated tokens, not padding
    h = hidden_before_completions(decoder, mb, carry)[real]  # (N, H): the state that predicts each token
    targets = mb.completion_ids[real]
    if not entropy:
        logp = chunked_logprobs(head, h, targets, temperature, chunk_tokens)  # (N,)
        return logp.new_zeros(real.shape).index_put((real,), logp)  # (n, C)
    logp, ent = chunked_logprobs_and_entropy(head, h, targets, temperature, chunk_tokens)  # (N,) each
    return logp.new_zeros(real.shape).index_put((real,), logp), ent.new_zeros(real.shape).index_put((real,), ent)


def hidden_before_completions(
    decoder: torch.nn.Module, mb: MicroBatch | SharedMicroBatch, carry: PromptCarry | None = None
) -> torch.Tensor:
    """Final hidden states (n, C, H): position t is the state that predicts completion token t."""
    if isinstance(mb, SharedMicroBatch):
        return shared_hidden(decoder, mb, carry)
    c_len = mb.completion_ids.shape[1]
    hidden = plain_forward(decoder, mb).last_hidden_state  # (n, P + C, H)
    return hidden[:, -c_len - 1 : -1]


def plain_forward(module: nn.Module, mb: MicroBatch, **kwargs: object) -> Any:
    """``module``'s output over the rows of ``mb``, each prompt and completion in one sequence, without a cache
    (``kwargs``: more arguments of its forward, e.g. ``logits_to_keep``). Rows of image prompts: each distinct
    prompt's images through the vision tower once in this forward, and the model's M-RoPE positions
    (:func:`~infgrpo.vision.features.rows_inputs`)."""
    positions = mb.position_ids
    if mb.visions is not None:
        positions, images = rows_inputs(module, mb.input_ids, mb.attention_mask, mb.visions, mb.completion_ids.shape[1])
        kwargs = {**kwargs, **images}
    return module(
        input_ids=mb.input_ids,
        attention_mask=mb.attention_mask,
        position_ids=positions,
        use_cache=False,
        **kwargs,
    )


def completion_logits(
    model: PreTrainedModel, mb: MicroBatch | SharedMicroBatch, carry: PromptCarry | None = None
) -> torch.Tensor:
    """The model's own logits (n, C, V) before each completion token (only the last C + 1 positions computed)."""
    if isinstance(mb, SharedMicroBatch):
        return shared_logits(model, mb, carry)
    c_len = mb.completion_ids.shape[1]
    out = plain_forward(model, mb, logits_to_keep=c_len + 1)
    if out.logits.shape[1] != c_len + 1:
        raise ValueError(
            f"{type(model).__name__} returned logits for {out.logits.shape[1]} positions, not the last {c_len + 1}: "
            "it ignores logits_to_keep, which infgrpo needs to align completion tokens with their log-probs"
        )
    return out.logits[:, :-1]  # (n, C, V): position t predicts completion token t


def full_logits_logprobs(
    model: PreTrainedModel,
    mb: MicroBatch | SharedMicroBatch,
    temperature: float = 1.0,
    chunk_rows: int = 8,
    entropy: bool = False,
    entropy_grad: bool = False,
    carry: PromptCarry | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Log-probs (n, C) from the model's own logits (the full-logits path; ``logit_chunk_tokens: 0``), and
    with ``entropy`` each position's entropy (n, C): without gradient unless ``entropy_grad`` (an entropy
    built with autograd would keep two float32 (rows x C x V) tensors alive after the backward).

    The log-softmax runs in chunks of ``chunk_rows`` rows so float32 logits of the whole micro-batch
    never coexist.
    """
    logits = completion_logits(model, mb, carry)  # (n, C, V)
    scale = temperature if temperature > 0 else 1.0
    pieces, entropies = [], []
    for s in range(0, logits.shape[0], chunk_rows):
        chunk = logits[s : s + chunk_rows]
        chunk = chunk.to(torch.promote_types(chunk.dtype, torch.float32)) / scale  # bf16 -> f32, f64 stays
        tok = mb.completion_ids[s : s + chunk_rows].unsqueeze(-1)
        logp = torch.log_softmax(chunk, dim=-1)
        pieces.append(logp.gather(-1, tok).squeeze(-1))
        if entropy:
            with torch.enable_grad() if entropy_grad else torch.no_grad():
                entropies.append(-(logp.exp() * logp).sum(-1))
    if not entropy:
        return torch.cat(pieces, dim=0)
    return torch.cat(pieces, dim=0), torch.cat(entropies, dim=0)
