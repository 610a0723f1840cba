"""One GRPO policy update over a rollout, as gradient accumulation over token-budget micro-batches.

:func:`prepare_microbatches` packs the B*G rollouts; :func:`accumulate_policy_gradients` runs
forward + backward per micro-batch with the loss normalized by whole-batch counts
(:class:`~infgrpo.algo.LossNorm`), so the accumulated gradient equals that of one big batch while
peak memory is set by ``token_budget`` alone. No Lightning here: the caller passes ``backward``.

Data parallel (DDP): each rank holds a share of the batch. The normalizers are summed over ranks
(:class:`~infgrpo.runtime.ranks.Ranks`), so each rank's loss is its share of the *global* loss; DDP averages
gradients over ranks, so each rank backpropagates its share times ``world_size``, and the averaged
gradient is that of the global loss, as one process over the whole batch would compute it. Every
micro-batch but the last runs under ``no_sync`` (DDP's gradient-accumulation context): ranks then
synchronize once per optimizer step, whatever their numbers of micro-batches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from infgrpo.algo import LossNorm, clipped_surrogate, policy_loss
from infgrpo.runtime.ranks import Ranks
from infgrpo.update.batching import MicroBatch, collate, pack_by_token_budget, split_rows
from infgrpo.update.chunked_head import DEFAULT_LOGIT_CHUNK_TOKENS
from infgrpo.update.logprobs import completion_logprobs


@dataclass
class LossConfig:
    """The objective's settings (see :mod:`infgrpo.algo.losses`), and how its log-probs are computed.

    Defaults are :class:`~infgrpo.GRPOModule`'s (``kl_bias_correction`` on, as in TRL 1.16).
    ``logit_chunk_tokens``: completion positions through the LM head at a time (0 = full logits; see
    :mod:`infgrpo.update.logprobs`).
    """

    loss_type: str = "grpo"
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    beta: float = 0.0
    kl_estimator: str = "k3"
    temperature: float = 1.0
    max_completion_length: int = 128
    kl_bias_correction: bool = True
    logit_chunk_tokens: int = DEFAULT_LOGIT_CHUNK_TOKENS


def prepare_microbatches(
    prompts: list[list[int]], completions: list[list[int]], token_budget: int, pad_id: int
) -> list[MicroBatch]:
    """Packs rollouts (prompt i, completion i) into micro-batches within ``token_budget``."""
    groups = pack_by_token_budget([len(p) for p in prompts], [len(c) for c in completions], token_budget)
    return [collate(rows, prompts, completions, pad_id) for rows in groups]


def split_microbatches(
    mbs: list[MicroBatch], old: list[torch.Tensor] | None, ref: list[torch.Tensor] | None
) -> tuple[list[MicroBatch], list[torch.Tensor] | None, list[torch.Tensor] | None]:
    """Every micro-batch of two or more rows in two halves, with its frozen log-probs (n, C) split alike.

    The accumulated gradient does not depend on the packing (the loss is normalized by whole-batch
    counts), so an update retried on the halves computes the same gradient in less memory.
    """
    out_mbs: list[MicroBatch] = []
    out_old: list[torch.Tensor] = []
    out_ref: list[torch.Tensor] = []
    for k, mb in enumerate(mbs):
        per_row = [old[k] if old is not None else None, ref[k] if ref is not None else None]
        for half, (o, r) in split_rows(mb, per_row):
            out_mbs.append(half)
            out_old.append(o)
            out_ref.append(r)
    return out_mbs, out_old if old is not None else None, out_ref if ref is not None else None


def reference_context(model: PreTrainedModel, ref_model: PreTrainedModel | None) -> contextlib.AbstractContextManager:
    """Adapters disabled on a peft model (the reference is the base model); otherwise a no-op."""
    if ref_model is None and hasattr(model, "disable_adapter"):
        return model.disable_adapter()
    return contextlib.nullcontext()


@torch.no_grad()
def frozen_logprobs(
    model: PreTrainedModel,
    mbs: list[MicroBatch],
    temperature: float,
    ref_model: PreTrainedModel | None = None,
    reference: bool = False,
    chunk_tokens: int = DEFAULT_LOGIT_CHUNK_TOKENS,
) -> list[torch.Tensor]:
    """Log-probs per micro-batch without gradients: the policy's (old) or the reference's.

    Computed as the policy's are (``chunk_tokens``, see :func:`~infgrpo.update.completion_logprobs`).
    """
    if reference:
        with reference_context(model, ref_model):
            target = ref_model if ref_model is not None else model
            return [completion_logprobs(target, mb, temperature, chunk_tokens) for mb in mbs]
    return [completion_logprobs(model, mb, temperature, chunk_tokens) for mb in mbs]


def accumulate_policy_gradients(
    model: PreTrainedModel,
    mbs: list[MicroBatch],
    advantages: torch.Tensor,
    cfg: LossConfig,
    backward: Callable[[torch.Tensor], None],
    old_logps: list[torch.Tensor] | None = None,
    ref_logps: list[torch.Tensor] | None = None,
    ranks: Ranks = Ranks(),  # noqa: B008 - frozen dataclass, never mutated
    no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict[str, float]:
    """Forward + ``backward(loss)`` per micro-batch; gradients accumulate in ``model``.

    ``advantages`` (N,) indexes rows of this rank's batch; ``old_logps`` / ``ref_logps`` are per
    micro-batch (n_mb, C_mb) or None (old = current, detached, as with one iteration).
    ``ranks``: the data-parallel ranks sharing the batch; ``no_sync``: a context in which
    ``backward`` does not synchronize gradients across ranks (see the module docstring).
    Returns the global batch loss and token-level KL / clip statistics.
    """
    local = torch.tensor(
        [sum(len(mb.rows) for mb in mbs), sum(mb.completion_mask.sum().item() for mb in mbs)], dtype=torch.float64
    )
    num_sequences, num_tokens = (int(x) for x in ranks.sum(local).tolist())
    norm = LossNorm(num_sequences, num_tokens, cfg.max_completion_length)
    device = next(model.parameters()).device
    total_loss, kl_sum, low_sum, high_sum = 0.0, 0.0, 0.0, 0.0
    for k, mb in enumerate(mbs):
        logp = completion_logprobs(model, mb, cfg.temperature, cfg.logit_chunk_tokens)  # (n, C)
        old = old_logps[k] if old_logps is not None else logp.detach()
        ref = ref_logps[k] if ref_logps is not None else None
        terms = clipped_surrogate(
            logp,
            old,
            advantages[mb.rows].to(device=device, dtype=logp.dtype),
            cfg.epsilon_low,
            cfg.epsilon_high,
            cfg.beta,
            ref,
            cfg.kl_estimator,
            cfg.kl_bias_correction,
        )
        mask = mb.completion_mask.to(device=device, dtype=logp.dtype)
        loss = policy_loss(cfg.loss_type, terms.loss, mask, norm)  # this rank's share of the global loss
        with no_sync() if k < len(mbs) - 1 else contextlib.nullcontext():
            backward(loss * ranks.world_size)  # DDP averages over ranks; the sum of the shares is wanted
        total_loss += loss.item()
        if terms.kl is not None:
            kl_sum += (terms.kl.detach() * mask).sum().item()
        low_sum += (terms.low_clipped * mask).sum().item()
        high_sum += (terms.high_clipped * mask).sum().item()
    total_loss, kl_sum, low_sum, high_sum = ranks.sum(
        torch.tensor([total_loss, kl_sum, low_sum, high_sum], dtype=torch.float64)
    ).tolist()
    tokens = max(norm.num_tokens, 1)
    return {
        "loss": total_loss,
        "kl": kl_sum / tokens,
        "clip_ratio/low": low_sum / tokens,
        "clip_ratio/high": high_sum / tokens,
        "clip_ratio": (low_sum + high_sum) / tokens,
        "micro_batches": float(len(mbs)),
    }
