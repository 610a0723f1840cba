"""PODS's down-sampling: of n rewards, the m whose (population) variance is largest.

    keep = max_variance_subset(torch.tensor([0., 0., 1., 0., 0., 0.]), 4)   # [0, 1, 2, 3]: the one 1 and three 0s

Xu et al., *Not All Rollouts are Useful: Down-Sampling Rollouts in LLM Reinforcement Learning* (PODS, arXiv
2504.13818): generate n, train on m. For a fixed sum of squares the variance of a subset is largest when it
takes its members from both ends of the sorted rewards, so the maximum over all C(n, m) subsets is the maximum
over the m + 1 splits "the k smallest and the m - k largest" (their Lemma): O(n log n), not exponential. Ties
between equal rewards go to the lower sample index, so the choice is deterministic. Failed rewards (NaN) are
taken last, only when fewer than m rewards are finite.
"""

from __future__ import annotations

import torch


def max_variance_subset(rewards: torch.Tensor, m: int) -> list[int]:
    """Indices (ascending) of the ``m`` of ``rewards`` (n,) with the largest variance (``m <= n``)."""
    n = rewards.numel()
    if not 0 < m <= n:
        raise ValueError(f"m={m} must be in 1..{n} (the number of rewards)")
    finite = [i for i in range(n) if not torch.isnan(rewards[i])]
    failed = [i for i in range(n) if torch.isnan(rewards[i])]
    if len(finite) <= m:
        return sorted(finite + failed[: m - len(finite)])
    values = rewards.double()
    order = sorted(finite, key=lambda i: (float(values[i]), i))  # ascending reward, then index
    best, best_var = None, -1.0
    for k in range(m + 1):  # the k smallest and the m - k largest
        pick = order[:k] + order[len(order) - (m - k) :]
        var = float(values[pick].var(unbiased=False))
        if var > best_var + 1e-12:
            best, best_var = pick, var
    return sorted(best)
