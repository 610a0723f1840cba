"""One GRPO policy update over a rollout, as gradient accumulation over token-budget micro-batches.

:func:`prepare_microbatches` packs the B*G rollouts; :func:`accumulate_policy_gradients` runs
forward + backward per micro-batch with the loss normalized by whole-batch counts
(:class:`~infgrpo.algo.LossNorm`), so the accumulated gradient equals that of one big batch while
peak memory is set by ``token_budget`` alone. Each pass over the micro-batches (the gradient, or a
frozen pass) runs a split group's shared prompt once (:class:`~infgrpo.update.shared_prompt.carry.PromptCarry`).
No Lightning here: the caller passes ``backward``.

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
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from infgrpo.algo import LossNorm, Objective, combine_mismatch, mismatch_metrics, objective_loss, reduce_means
from infgrpo.runtime.ranks import Ranks
from infgrpo.update.batching import MicroBatch, collate, pack_by_token_budget
from infgrpo.update.chunked_head import DEFAULT_LOGIT_CHUNK_TOKENS
from infgrpo.update.logprobs import completion_logprobs
from infgrpo.update.shared_prompt.batching import SharedMicroBatch
from infgrpo.update.shared_prompt.carry import PromptCarry

Batch = MicroBatch | SharedMicroBatch


@dataclass
class GradientStep:
    """What :func:`accumulate_policy_gradients` measured over the micro-batches of one optimizer step."""

    stats: dict[str, float]
    """The global batch loss, the objective's statistics and the rollout mismatch (see the function)."""
    entropy_bonus: tuple[float, float] | None = None
    """(entropy sum, tokens) over every rank, with an entropy bonus: what moves the adaptive coefficient."""


@dataclass
class LossConfig:
    """What the update minimizes (:class:`~infgrpo.algo.Objective`), and how its log-probs are computed.

    ``temperature``: the sampling temperature the log-probs are taken at; ``max_completion_length``: the
    ``dr_grpo`` normalizer; ``logit_chunk_tokens``: completion positions through the LM head at a time
    (0 = full logits; see :mod:`infgrpo.update.logprobs`).
    """

    objective: Objective = field(default_factory=Objective)
    temperature: float = 1.0
    max_completion_length: int = 128
    logit_chunk_tokens: int = DEFAULT_LOGIT_CHUNK_TOKENS


def prepare_microbatches(
    prompts: list[list[int]], completions: list[list[int]], token_budget: int, pad_id: int
) -> list[MicroBatch]:
    """Packs rollouts (prompt i, completion i) into micro-batches within ``token_budget``."""
    groups = pack_by_token_budget([len(p) for p in prompts], [len(c) for c in completions], token_budget)
    return [collate(rows, prompts, completions, pad_id) for rows in groups]


def per_row(mbs: list[Batch], values: list[torch.Tensor]) -> list[torch.Tensor]:
    """``values[i]`` (a 1-D tensor per batch row, e.g. the rollout's log-probs) as one (n_mb, C_mb) tensor per
    micro-batch, right-padded with 0, on each micro-batch's device."""
    out = []
    for mb in mbs:
        width = mb.completion_ids.shape[1]
        t = torch.zeros(len(mb.rows), width, dtype=torch.float32)
        for r, row in enumerate(mb.rows):
            v = torch.as_tensor(values[row], dtype=torch.float32)[:width]
            t[r, : len(v)] = v
        out.append(t.to(mb.completion_ids.device))
    return out


def split_microbatches(mbs: list[Batch]) -> list[Batch]:
    """Every micro-batch of two or more rows in two halves, their frozen tensors (n, C) split alike.

    The accumulated gradient does not depend on the packing (the loss is normalized by whole-batch
    counts), so an update retried on the halves computes the same gradient in less memory.
    """
    return [half for mb in mbs for half in mb.halves()]


def reference_context(model: PreTrainedModel, ref_model: PreTrainedModel | None) -> contextlib.AbstractContextManager:
    """Adapters disabled on a peft model (the reference is the base model); otherwise a no-op."""
    if ref_model is None and hasattr(model, "disable_adapter"):
        return model.disable_adapter()
    return contextlib.nullcontext()


@torch.no_grad()
def frozen_logprobs(
    model: PreTrainedModel,
    mbs: list[Batch],
    temperature: float,
    ref_model: PreTrainedModel | None = None,
    reference: bool = False,
    chunk_tokens: int = DEFAULT_LOGIT_CHUNK_TOKENS,
    entropy: bool = False,
) -> list[torch.Tensor] | tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Log-probs per micro-batch without gradients: the policy's (old) or the reference's (and, with
    ``entropy``, the per-token entropies too).

    Computed as the policy's are (``chunk_tokens``, see :func:`~infgrpo.update.completion_logprobs`).
    """
    target = (ref_model if ref_model is not None else model) if reference else model
    carry = PromptCarry(mbs)  # each prompt once, however many micro-batches its group spans
    with reference_context(model, ref_model) if reference else contextlib.nullcontext():
        outs = [completion_logprobs(target, mb, temperature, chunk_tokens, entropy=entropy, carry=carry) for mb in mbs]
    return ([o[0] for o in outs], [o[1] for o in outs]) if entropy else outs


def accumulate_policy_gradients(
    model: PreTrainedModel,
    mbs: list[Batch],
    advantages: torch.Tensor,
    cfg: LossConfig,
    backward: Callable[[torch.Tensor], None],
    ranks: Ranks = Ranks(),  # noqa: B008 - frozen dataclass, never mutated
    no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    entropy_coef: float | None = None,
    batch_counts: tuple[int, int] | None = None,
) -> GradientStep:
    """Forward + ``backward(loss)`` per micro-batch; gradients accumulate in ``model``.

    ``advantages`` (N,) indexes rows of this rank's batch. Each micro-batch's
    :class:`~infgrpo.update.batching.Frozen` tensors are its old, reference and behaviour (the rollout's)
    log-probs and its entropy mask, (n_mb, C_mb) each or None (old = current, detached, as with one
    iteration). ``entropy_coef``: this step's bonus coefficient under ``use_adaptive_entropy``. ``ranks``:
    the data-parallel ranks sharing the batch; ``no_sync``: a context in which ``backward`` does not
    synchronize gradients across ranks (see the module docstring). Returns the global batch loss, the
    objective's statistics (token means over the batch), the rollout log-prob mismatch (``rollout/*``, with
    behaviour log-probs) and, with an entropy bonus, its (sum, tokens) for the adaptive coefficient.
    ``batch_counts``: (sequences, active tokens) of this rank's whole batch when ``mbs`` hold only some of
    its rows (rows of advantage 0 left out, :mod:`infgrpo.algo.zero_advantage`): the normalizers count every
    row (not with an entropy bonus, whose token count would need the others).
    """
    obj = cfg.objective
    # 1) whole-batch counts on every rank: the normalizers of every micro-batch's loss
    masks = [mb.completion_mask for mb in mbs]
    given = [mb.frozen.entropy_mask for mb in mbs]
    entropy_masks = given if any(m is not None for m in given) else None  # top_entropy_quantile < 1
    bonus = [m * e.to(m) for m, e in zip(masks, entropy_masks, strict=True)] if entropy_masks is not None else masks
    tokens = torch.stack([torch.stack([m.sum(), b.sum()]) for m, b in zip(masks, bonus, strict=True)]).sum(0)
    local = torch.cat([torch.tensor([float(sum(len(mb.rows) for mb in mbs))]), tokens.double().cpu()])  # one sync
    if batch_counts is not None:
        if obj.entropy_bonus:
            raise ValueError("batch_counts (a partial batch) cannot be used with an entropy bonus")
        local = torch.tensor([float(batch_counts[0]), float(batch_counts[1]), float(batch_counts[1])]).double()
    num_sequences, num_tokens, bonus_tokens = (int(x) for x in ranks.sum(local).tolist())
    norm = LossNorm(num_sequences, num_tokens, cfg.max_completion_length, bonus_tokens if entropy_masks else None)
    device = next(model.parameters()).device
    # 2) forward + backward per micro-batch; DDP synchronizes after the last; a group's prompt runs once
    outputs, carry = [], PromptCarry(mbs)
    for k, mb in enumerate(mbs):
        logp, ent = completion_logprobs(  # (n, C) each; the entropy's gradient only for the entropy bonus
            model, mb, cfg.temperature, cfg.logit_chunk_tokens, entropy=True, entropy_grad=obj.entropy_bonus,
            carry=carry,
        )  # fmt: skip
        frozen = mb.frozen
        out = objective_loss(
            obj, logp, advantages[mb.rows].to(device=device, dtype=logp.dtype), mb.completion_mask.to(device), norm,
            old_logp=frozen.old, ref_logp=frozen.ref, entropy=ent, entropy_mask=frozen.entropy_mask,
            behaviour_logp=frozen.behaviour, entropy_coef=entropy_coef,
        )  # fmt: skip
        with no_sync() if k < len(mbs) - 1 else contextlib.nullcontext():
            backward(out.loss * ranks.world_size)  # DDP averages over ranks; the sum of the shares is wanted
        out.loss = out.loss.detach()
        outputs.append(out)
        del logp, ent  # before the next micro-batch's forward
    # 3) statistics of the global batch
    sums = ranks.sum(torch.stack([torch.stack([o.loss, o.policy_loss]) for o in outputs]).double().sum(0))
    stats = {"loss": sums[0].item(), "policy_loss": sums[1].item(), **reduce_means(outputs, ranks)}
    stats.setdefault("kl", 0.0)  # logged every step, 0 without a KL term
    if all(o.mismatch is not None for o in outputs):
        mismatch = mismatch_metrics(combine_mismatch([o.mismatch for o in outputs], ranks))
        stats.update({f"rollout/{k}": v for k, v in mismatch.items()})
    entropy_bonus = None
    if obj.entropy_bonus:
        entropy_sum, tokens = ranks.sum(torch.stack([o.bonus for o in outputs]).sum(0)).tolist()
        entropy_bonus = (entropy_sum, tokens)
    stats["micro_batches"] = float(len(mbs))
    return GradientStep(stats, entropy_bonus)
