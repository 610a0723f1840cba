import itertools

import pytest
import torch

from infgrpo.algo.down_sample import max_variance_subset


def brute_force(rewards, m):
    best = max(itertools.combinations(range(len(rewards)), m), key=lambda c: rewards[list(c)].var(unbiased=False))
    return float(rewards[list(best)].var(unbiased=False))


@pytest.mark.parametrize("seed", range(40))
def test_the_subset_has_the_largest_variance_of_all_subsets(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(2, 11, (1,), generator=g))
    m = int(torch.randint(1, n + 1, (1,), generator=g))
    kind = seed % 3
    if kind == 0:  # binary rewards, as accuracy
        rewards = torch.randint(0, 2, (n,), generator=g).double()
    elif kind == 1:  # a few levels (format + accuracy)
        rewards = torch.randint(0, 4, (n,), generator=g).double() / 2
    else:
        rewards = torch.rand(n, generator=g, dtype=torch.float64)
    pick = max_variance_subset(rewards, m)
    assert pick == sorted(set(pick)) and len(pick) == m
    assert float(rewards[pick].var(unbiased=False)) == pytest.approx(brute_force(rewards, m), abs=1e-12)


def test_one_right_answer_among_many_is_kept_and_nan_rewards_come_last():
    rewards = torch.zeros(64, dtype=torch.float64)
    rewards[37] = 1.0
    pick = max_variance_subset(rewards, 8)
    assert 37 in pick and len(pick) == 8
    with_nan = torch.tensor([float("nan"), 1.0, 0.0, float("nan")], dtype=torch.float64)
    assert max_variance_subset(with_nan, 2) == [1, 2]
    assert max_variance_subset(with_nan, 3) == [0, 1, 2]
    with pytest.raises(ValueError, match="m=5 must be in 1..4"):
        max_variance_subset(with_nan, 5)
