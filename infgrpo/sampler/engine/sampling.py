"""Token sampling from given uniforms, every row at once (schedule invariance).

The t-th token of a sequence is drawn by inverse CDF with one uniform that depends only on
(seed, prompt index, sample index, t) (:mod:`infgrpo.sampler.engine.counter_rng`). A completion therefore
depends only on (seed, prompt, sample index), never on the slot, the round or the other sequences
in the batch, and sampling needs no random-number kernel of its own: no host synchronization, no
per-sequence work, the same operators whatever the batch.

``banned`` ids (a vision-language model's image placeholders, :func:`infgrpo.vision.families.banned_token_ids`) are
never drawn, greedy or not, as ``generate`` with ``suppress_tokens`` draws them never (TRL passes the image token):
they leave the distribution before top-k / top-p, as HF's suppression runs before its warpers. Their log-prob stays
in the normalizer, as it does in the training forward (which knows no suppression), like a token top-k filtered out.
"""

from __future__ import annotations

import torch


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k then top-p (nucleus) filtering of (A, V) logits; removed entries become -inf."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (A, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)  # (A, V), once
        drop_sorted = probs.cumsum(dim=-1) - probs >= top_p  # keep the first token past top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_tokens(
    logits: torch.Tensor,
    uniforms: torch.Tensor,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    banned: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next tokens (A, K) and their log-probs (A, K) at ``temperature``: K draws from each row of (A, V) logits.

    ``uniforms`` (A, K) in [0, 1): draw k of row a is ``token = first i with cdf[i] > u * cdf[-1]``,
    the inverse CDF of the tempered, filtered distribution (one uniform per token instead of V
    exponentials for the exponential race keeps a 150k vocabulary cheap). A token of zero
    probability (filtered out) is never chosen: ``cdf`` does not rise at it, and the rare ``u * cdf[-1]``
    that rounds up to ``cdf[-1]`` takes the last token of positive probability. The decode step uses
    K = 1; a prefill draws the first tokens of all K samples of a prompt from its one row of logits.
    ``temperature`` 0 is greedy (``uniforms`` unused). The log-prob is that of the tempered,
    unfiltered distribution, as the training forward computes it. Non-finite logits (NaN, inf) give
    tokens within the vocabulary and a NaN log-prob, which the host sees in what it reads back anyway
    (:mod:`infgrpo.sampler.engine.finite`): no check of its own on the device, no host sync. ``banned``: (B,) ids
    never drawn (module docstring); None or empty: none.
    """
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    scaled = logits / temperature if temperature not in (0.0, 1.0) else logits
    lse = torch.logsumexp(scaled, dim=-1, keepdim=True)  # (A, 1)
    ban = banned is not None and banned.numel() > 0
    if temperature == 0:
        allowed = logits.index_fill(-1, banned, float("-inf")) if ban else logits
        tokens = torch.argmax(allowed, dim=-1, keepdim=True).expand(-1, uniforms.shape[-1])  # (A, K)
    else:
        # Few full-vocabulary temporaries (one exp, cumulated in place): at a 150k vocabulary each is
        # ~0.6 MB a row. A float32 running sum moves each token's share of the CDF by at most one ulp.
        allowed = scaled.index_fill(-1, banned, float("-inf")) if ban else scaled  # (A, V): before top-k / top-p
        cdf = torch.exp(filter_logits(allowed, top_k, top_p) - lse).cumsum_(dim=-1)  # (A, V)
        total = cdf[:, -1:].contiguous()  # (A, 1); searchsorted copies a strided value tensor anyway
        drawn = torch.searchsorted(cdf, uniforms.to(cdf.dtype) * total, right=True)  # (A, K)
        # (A, 1): the last token of positive probability, the first index of the CDF's maximum (argmax returns the
        # first); what searchsorted(cdf, total) finds, but a NaN row (non-finite logits) stays inside the vocabulary
        last = torch.argmax(cdf, dim=-1, keepdim=True)
        tokens = torch.minimum(drawn, last)
    return tokens, scaled.gather(-1, tokens) - lse  # log-softmax of the chosen tokens only
