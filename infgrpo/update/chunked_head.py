"""Token log-probs through the LM head in chunks: no (tokens x vocabulary) logits, forward or backward.

For N positions with final hidden states ``h`` (N, H), head weight ``W`` (V, H), optional bias ``b``
(V,) and targets ``t`` (N,), the log-prob of each target at temperature T is::

    z = h @ W^T + b                       # (c, V) in the head's dtype, c <= chunk positions at a time
    logp = log_softmax(float32(z) / T)[t] # (c,)   float32 (float64 stays float64)

:class:`ChunkedLogprobs` computes it ``chunk`` positions at a time and keeps only the per-position
log-sum-exp (N,) for the backward, which recomputes each chunk's logits and turns them into the
gradient in place: ``dlogp/dz = (onehot(t) - softmax(z / T)) / T``. So the extra memory is a few
(chunk x V) buffers, never (N x V) — the fused linear cross-entropy idea of Liger and Unsloth, with
the GRPO target (a log-prob per token, not a mean loss), in plain torch so it runs anywhere. The last
chunk is not recomputed: its log p, the buffer the forward ends with, waits for the backward, which
starts with it, so positions within one chunk cost the head's matmul twice (forward, input gradient)
instead of three times.

Peak memory of the head, beyond its inputs and the (N,) statistics, with c = chunk and a float32 head
(a half-precision head adds a half-size copy of the chunk's logits):

- forward: the chunk's logits (c, V) (a LoRA term added in place when its dtype is the head's), plus the
  temporaries of the reductions over the vocabulary (log-sum-exp, entropy): on a CPU rows of at most
  :data:`REDUCE_BYTES` at a time, elsewhere a second (c, V) buffer (one kernel per reduction);
- between the forward and the backward (when a backward will follow): the last chunk's log p (c, V),
  on top of what the caller allocates in between (the loss: (n, C) tensors);
- backward: that kept chunk first, freed before any other chunk is recomputed, so one (c, V) buffer
  at a time (two with the entropy's gradient), plus the gradient of each trainable weight (V, D), which
  the chunks accumulate into in place (no (V, D) product per chunk), and which autograd then adds to
  the weight's ``.grad`` of earlier micro-batches.

:func:`chunked_logprobs_and_entropy` also returns each position's entropy ``H = -sum_v p_v log p_v``
from the same chunks (``lse - sum p z``), for TRL's ``entropy`` metric, ``top_entropy_quantile`` and
the entropy bonus; its backward adds ``dH/dz = -p * (log p + H) / T`` in the same recomputation.

A LoRA-adapted head (peft ``lora.Linear``, when ``lm_head`` is a target) is a sum of linear terms,
``h @ W^T + (s * A(dropout(h))) @ B^T``: the rank-r input ``s * A(h)`` (N, r) is computed outside
with ordinary autograd and enters as a second (input, weight) term. Heads that are not linear in
that way (quantized, DoRA, LoRA with bias) are refused by :func:`head_terms`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

DEFAULT_LOGIT_CHUNK_TOKENS = 512
"""Positions per chunk by default. The head's memory grows with the chunk: about one float32 (chunk x vocabulary)
buffer at a time (two in a CUDA forward; the module docstring), 0.31 GB at 512 positions and 151,936 tokens; and a
512-row matmul is large enough for a GPU to run the head near full throughput."""

REDUCE_BYTES = 32 * 2**20
"""On a CPU, the forward's reductions over the vocabulary run on rows of a chunk whose float32 logits take at
most this many bytes (55 rows at 151,936 tokens), so their temporaries stay small beside the chunk instead of
doubling it: there resident memory is the measure and a call costs microseconds. Elsewhere (CUDA) each runs
once over the whole chunk: one kernel, its buffer reused by the caching allocator."""


def _logits(xs: list[torch.Tensor], ws: list[torch.Tensor], bias: torch.Tensor | None, s: int, e: int) -> torch.Tensor:
    """Logits (e - s, V) of positions s..e: the sum of ``xs[i][s:e] @ ws[i]^T`` plus ``bias``, in the dtype of
    the first term (the head's; the LoRA terms are cast to it, as peft does)."""
    z = F.linear(xs[0][s:e], ws[0], bias)  # (c, V)
    for x, w in zip(xs[1:], ws[1:], strict=True):
        if x.dtype == w.dtype == z.dtype:
            z.addmm_(x[s:e], w.t())  # in place on the fresh logits: no second (c, V) buffer
        else:
            z = z + F.linear(x[s:e], w).to(z.dtype)
    return z


def _reduce_rows(z: torch.Tensor) -> int:
    """Rows of the (c, V) logits ``z`` the forward reduces at a time (see :data:`REDUCE_BYTES`)."""
    if z.device.type != "cpu":
        return z.shape[0]
    return max(1, REDUCE_BYTES // max(1, z.shape[1] * z.element_size()))


def _scaled(z: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    """``z.to(dtype) / scale``, in place on the new logits (a fresh matmul output nobody else holds)."""
    z = z.to(dtype)
    return z.div_(scale) if scale != 1.0 else z


def _reduce(
    z: torch.Tensor, s: int, targets: torch.Tensor, lse: torch.Tensor, logp: torch.Tensor, ent: torch.Tensor | None
) -> None:
    """Fills ``lse``, ``logp`` and ``ent`` (N,) (None: no entropy) at the positions s .. s + c of the chunk's scaled
    logits ``z`` (c, V), :func:`_reduce_rows` rows at a time; with an entropy ``z`` becomes log p in place."""
    c, rows = z.shape[0], _reduce_rows(z)
    for r in range(0, c, rows):
        zb, sl = (z, slice(s, s + c)) if rows >= c else (z[r : r + rows], slice(s + r, s + min(c, r + rows)))
        lse[sl] = torch.logsumexp(zb, dim=-1)  # a (b, V) temporary inside
        logp[sl] = zb.gather(-1, targets[sl, None]).squeeze(-1) - lse[sl]
        if ent is not None:
            zb.sub_(lse[sl, None])  # (b, V) log p, in place
            ent[sl] = -zb.exp().mul_(zb).sum(-1)  # -sum p log p, a (b, V) temporary


class ChunkedLogprobs(torch.autograd.Function):
    """``log_softmax(sum_i x_i @ w_i^T + bias) / T)[targets]`` (N,), chunk by chunk (see the module docstring).

    Arguments of :meth:`apply`: ``targets`` (N,) int64, ``scale`` (the temperature), ``chunk``
    (positions per chunk), ``entropy`` (bool: also return the entropy (N,) of each position's
    distribution), ``bias`` (V,) or None, then the terms ``x_1, w_1, x_2, w_2, ...`` with ``x_i`` (N, D_i)
    and ``w_i`` (V, D_i). Gradients flow to every x_i, w_i and the bias that need them, from the
    log-probs, the entropy, or both.
    """

    @staticmethod
    def forward(ctx, targets, scale, chunk, entropy, bias, *terms):  # noqa: ANN001, ANN205 - autograd.Function
        """Log-probs (N,) [and entropies (N,)], one chunk of logits alive at a time; saves (N,) statistics, and
        when a backward will follow the last chunk's log p (c, V), the buffer alive at the end anyway."""
        ctx.set_materialize_grads(False)  # an output nobody differentiates gets None, not a tensor of zeros
        xs, ws = list(terms[0::2]), list(terms[1::2])
        n = targets.shape[0]
        out_dtype = torch.promote_types(ws[0].dtype, torch.float32)  # bf16 -> f32, f64 stays
        logp = torch.empty(n, dtype=out_dtype, device=targets.device)
        lse = torch.empty(n, dtype=out_dtype, device=targets.device)
        ent = torch.empty(n, dtype=out_dtype, device=targets.device) if entropy else lse[:0]
        keep = any(ctx.needs_input_grad)  # a backward may follow
        ctx.kept, ctx.logit_dtype = None, None
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            raw = _logits(xs, ws, bias, s, e)  # (c, V) the head's dtype
            ctx.logit_dtype = raw.dtype
            z = _scaled(raw, out_dtype, scale)  # (c, V) float32
            del raw
            _reduce(z, s, targets, lse, logp, ent if entropy else None)
            if keep and e == n:  # the backward starts from it instead of recomputing this chunk (one head matmul fewer)
                if not entropy:
                    z.sub_(lse[s:e, None])  # (c, V) log p, in place
                ctx.kept = (s, z)
            del z
        ctx.scale, ctx.chunk, ctx.num_terms, ctx.entropy = scale, chunk, len(xs), entropy
        ctx.save_for_backward(targets, lse, ent, bias, *terms)
        return (logp, ent) if entropy else logp

    @staticmethod
    def backward(ctx, *grads):  # noqa: ANN001, ANN205 - autograd.Function signature
        """Gradients of the terms and bias from the outputs' gradients (N,) (None: not used), one chunk at a time.

        Per position, with ``p = softmax(z / T)``: ``dlogp_t/dz = (onehot(t) - p) / T`` and
        ``dH/dz = -p * (log p + H) / T``.
        """
        targets, lse, ent, bias, *terms = ctx.saved_tensors
        grad_logp, grad_ent = (grads[0], grads[1]) if ctx.entropy else (grads[0], None)
        if grad_logp is None and grad_ent is None:
            return (None,) * (5 + 2 * ctx.num_terms)
        xs, ws = terms[0::2], terms[1::2]
        needs = ctx.needs_input_grad  # (targets, scale, chunk, entropy, bias, x_1, w_1, x_2, w_2, ...)
        grad_bias = torch.zeros_like(bias) if bias is not None and needs[4] else None
        grad_x = [torch.empty_like(x) if needs[5 + 2 * i] else None for i, x in enumerate(xs)]
        grad_w = [torch.zeros_like(w) if needs[6 + 2 * i] else None for i, w in enumerate(ws)]
        n, logit_dtype = targets.shape[0], ctx.logit_dtype
        kept, ctx.kept = ctx.kept, None  # the last chunk's log p, consumed (a second backward recomputes it)
        starts = list(range(0, n, ctx.chunk))
        if kept is not None:  # its chunk first: the buffer is freed before any other chunk is recomputed
            starts.remove(kept[0])
            starts.insert(0, kept[0])
        for s in starts:
            e = min(n, s + ctx.chunk)
            if kept is not None:
                gz = kept[1]  # (c, V) log p from the forward
                kept = None
            else:
                z = _logits(list(xs), list(ws), bias, s, e)  # (c, V) recomputed, the head's dtype
                gz = _scaled(z, lse.dtype, ctx.scale)  # (c, V) float32 (z itself when the head is float32)
                del z
                gz.sub_(lse[s:e, None])  # log p, in place
            if grad_ent is None:
                g = grad_logp[s:e, None].to(gz.dtype)  # (c, 1)
                gz.exp_().mul_(-g).scatter_add_(-1, targets[s:e, None], g)  # g * (onehot - p)
            else:
                p = gz.exp()  # (c, V), a second buffer
                h = grad_ent[s:e, None].to(gz.dtype)  # (c, 1)
                gz.add_(ent[s:e, None]).mul_(p).mul_(-h)  # -h * p * (log p + H)
                if grad_logp is not None:
                    g = grad_logp[s:e, None].to(p.dtype)
                    gz.add_(p.mul_(-g).scatter_add_(-1, targets[s:e, None], g))  # + g * (onehot - p)
                del p
            gz = gz.div_(ctx.scale).to(logit_dtype)  # (c, V): d(output)/dz, the head's dtype
            if grad_bias is not None:
                grad_bias += gz.sum(dim=0).to(grad_bias.dtype)
            for i in range(ctx.num_terms):
                if grad_x[i] is not None:
                    grad_x[i][s:e] = (gz @ ws[i].to(logit_dtype)).to(grad_x[i].dtype)  # (c, D_i)
                if grad_w[i] is not None and grad_w[i].dtype == logit_dtype:
                    grad_w[i].addmm_(gz.t(), xs[i][s:e].to(logit_dtype))  # (V, D_i) += in place: no (V, D_i) temporary
                elif grad_w[i] is not None:
                    grad_w[i] += (gz.t() @ xs[i][s:e].to(logit_dtype)).to(grad_w[i].dtype)  # (V, D_i)
            del gz
        pairs = [g for i in range(ctx.num_terms) for g in (grad_x[i], grad_w[i])]
        return None, None, None, None, grad_bias, *pairs


def is_plain_linear(module: nn.Module) -> bool:
    """True when ``module`` computes exactly ``F.linear(x, weight, bias)`` with float weights."""
    return (
        isinstance(module, nn.Linear)
        and type(module).forward is nn.Linear.forward  # not a quantized subclass (bitsandbytes)
        and module.weight.is_floating_point()
    )


def head_terms(
    head: nn.Module, hidden: torch.Tensor, field: str = "logit_chunk_tokens"
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor | None]:
    """The linear terms ``[(x_i (N, D_i), w_i (V, D_i)), ...]`` and bias (V,) | None of ``head`` at ``hidden`` (N, H).

    A plain ``nn.Linear`` is one term; a peft LoRA-adapted linear adds ``(scaling * A(dropout(h)), B)``
    per active adapter (none while adapters are disabled or merged). Anything else raises a
    ValueError naming ``field``, since computing something else silently would train another model.
    """
    if is_plain_linear(head):
        return [(hidden, head.weight)], head.bias
    base = getattr(head, "base_layer", None)
    if base is None or not hasattr(head, "lora_A") or not is_plain_linear(base):
        raise ValueError(
            f"{field}: the model's output layer is a {type(head).__name__}, which the chunked LM head cannot "
            f"compute (it handles a float nn.Linear, optionally LoRA-adapted by peft); set {field}: 0 to use "
            "full logits"
        )
    terms = [(hidden, base.weight)]
    if head.disable_adapters or head.merged:
        return terms, base.bias
    for name in head.active_adapters:
        if name not in head.lora_A.keys():
            continue
        lora_a, lora_b = head.lora_A[name], head.lora_B[name]
        if name in getattr(head, "lora_variant", {}) or lora_b.bias is not None:
            raise ValueError(
                f"{field}: the output layer's LoRA adapter {name!r} is a variant (DoRA or lora_bias) the chunked "
                f"LM head cannot compute; set {field}: 0 to use full logits"
            )
        x = hidden.to(lora_a.weight.dtype)
        u = lora_a(head.lora_dropout[name](x)) * head.scaling[name]  # (N, r), ordinary autograd
        terms.append((u, lora_b.weight))
    return terms, base.bias


def _apply(
    head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, chunk_tokens: int, entropy: bool
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """:class:`ChunkedLogprobs` on ``head``'s linear terms at ``hidden`` (N, H), after validating the chunk."""
    if chunk_tokens < 1:
        raise ValueError(f"logit_chunk_tokens={chunk_tokens} must be >= 1 here (0 selects the full-logits path)")
    terms, bias = head_terms(head, hidden)
    scale = float(temperature) if temperature > 0 else 1.0
    flat = [t for pair in terms for t in pair]
    return ChunkedLogprobs.apply(targets, scale, int(chunk_tokens), entropy, bias, *flat)


def chunked_logprobs(
    head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, chunk_tokens: int
) -> torch.Tensor:
    """Log-probs (N,) of ``targets`` (N,) after final hidden states ``hidden`` (N, H), through ``head``.

    ``temperature`` divides the logits (<= 0 counts as 1, as greedy decoding has no temperature);
    ``chunk_tokens`` positions go through the head at a time, forward and backward.
    """
    return _apply(head, hidden, targets, temperature, chunk_tokens, entropy=False)


def chunked_logprobs_and_entropy(
    head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, chunk_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs (N,) of ``targets`` and the entropy (N,) of each position's tempered distribution.

    As :func:`chunked_logprobs`, with ``H = -sum_v p_v log p_v`` of ``p = softmax(logits / temperature)``
    computed in the same chunks (one more (chunk x V) buffer, (N,) saved). The entropy is differentiable:
    a loss that uses it (the entropy bonus) gets its gradient through the same recomputation; one
    that only reads it (logging, the entropy mask) adds nothing to the backward.
    """
    return _apply(head, hidden, targets, temperature, chunk_tokens, entropy=True)
