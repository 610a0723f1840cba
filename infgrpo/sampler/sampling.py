"""Token sampling with one random stream per sequence (schedule invariance).

Each sequence owns a ``torch.Generator`` seeded from (seed, prompt index, sample index); its t-th
token consumes the t-th draw of that stream. A completion therefore depends only on
(seed, prompt, sample index), never on the slot, the round or the other sequences in the batch.
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

    Sampling is ``argmax(log p - log E)`` with E ~ Exp(1) drawn from each row's own generator
    (the exponential race: an exact categorical sample with no cumulative sums). The log-prob is
    that of the tempered, unfiltered distribution, as the training forward computes it.
    """
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    scaled = logits / temperature if temperature > 0 else logits
    logp = torch.log_softmax(scaled, dim=-1)  # (A, V)
    if temperature == 0:
        tokens = torch.argmax(logits, dim=-1)
    else:
        filtered = torch.log_softmax(filter_logits(scaled, top_k, top_p), dim=-1)
        noise = torch.stack(
            [
                torch.empty(logits.shape[-1], dtype=logp.dtype, device=g.device).exponential_(generator=g)
                for g in generators
            ]
        ).to(logits.device)  # (A, V)
        tokens = torch.argmax(filtered - noise.log(), dim=-1)
    return tokens, logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
