"""Token sampling with one random stream per sequence (schedule invariance).

Each sequence owns a ``torch.Generator`` seeded from (seed, prompt index, sample index); its t-th
token consumes the t-th uniform of that stream. A completion therefore depends only on
(seed, prompt, sample index), never on the slot, the round or the other sequences in the batch.
"""

from __future__ import annotations

import hashlib

import torch


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers, stable across processes and platforms."""
    digest = hashlib.blake2b(",".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k then top-p (nucleus) filtering of (A, V) logits; removed entries become -inf."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (A, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop_sorted = cum - torch.softmax(sorted_logits, dim=-1) >= top_p  # keep the first token past top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_tokens(
    logits: torch.Tensor,
    generators: list[torch.Generator],
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next tokens (A,) and their log-probs (A,) at ``temperature`` from (A, V) logits.

    Sampling is by inverse CDF with **one** uniform per token from each row's own generator:
    ``token = first i with cumsum(p)[i] > u * sum(p)``. One draw per token
    (instead of V exponentials for the exponential race) keeps the per-sequence streams cheap at a
    150k vocabulary; zero-probability (filtered) tokens can never be chosen. The log-prob is that of
    the tempered, unfiltered distribution, as the training forward computes it.
    """
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    scaled = logits / temperature if temperature not in (0.0, 1.0) else logits
    if temperature == 0:
        tokens = torch.argmax(logits, dim=-1)
    else:
        # Few full-vocabulary temporaries (one softmax, cumulated in place): at a 150k vocabulary
        # each is ~0.6 MB a row, and fewer, same-sized allocations keep the heap from fragmenting.
        # A float32 running sum moves each token's share of the CDF by at most one ulp (~6e-8).
        cdf = torch.softmax(filter_logits(scaled, top_k, top_p), dim=-1).cumsum_(dim=-1)  # (A, V)
        u = torch.cat([torch.rand(1, generator=g, device=g.device) for g in generators]).to(cdf.device)
        target = (u * cdf[:, -1]).unsqueeze(-1)  # (A, 1)
        tokens = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=logits.shape[-1] - 1)
    chosen = scaled.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return tokens, chosen - torch.logsumexp(scaled, dim=-1)  # log-softmax of the chosen tokens only
