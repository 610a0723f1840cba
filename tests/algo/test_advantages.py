import math

import pytest
import torch

from infgrpo.algo import ADVANTAGES, grpo_advantages, zero_std_fraction


def test_group_scaling_hand_computed():
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=2, scale_rewards="group")
    expected = 0.5 / (math.sqrt(0.5) + 1e-4)  # group std of [1, 0] (unbiased) = sqrt(0.5)
    assert torch.allclose(adv, torch.tensor([expected, -expected, -expected, expected]))


def test_none_only_centers_on_the_group_mean():
    adv = grpo_advantages(torch.tensor([3.0, 1.0, 2.0, 10.0, 10.0, 10.0]), group_size=3, scale_rewards="none")
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 0.0, 0.0, 0.0, 0.0]))


def test_batch_scaling_uses_std_of_all_rewards():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    adv = grpo_advantages(r, group_size=2, scale_rewards="batch")
    std = r.std().item()  # unbiased std over the 4 rewards
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 0.0, 0.0]) / (std + 1e-4))


def test_batch_scaling_of_one_ranks_share_uses_the_whole_batch_std():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])  # rank 0 holds the first group, rank 1 the others
    share = grpo_advantages(r[:2], group_size=2, scale_rewards="batch", batch_rewards=r)
    std = r.std().item()  # unbiased std over all 6 rewards, not over the share's 2
    assert torch.allclose(share, torch.tensor([0.5, -0.5]) / (std + 1e-4))


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_float64_loop_recomputation(scale):
    g = torch.Generator().manual_seed(0)
    r = torch.rand(24, generator=g, dtype=torch.float64)
    adv = grpo_advantages(r, group_size=6, scale_rewards=scale)
    all_std = math.sqrt(sum((x - r.mean().item()) ** 2 for x in r.tolist()) / 23)
    for p in range(4):
        grp = r[p * 6 : (p + 1) * 6].tolist()
        mean = sum(grp) / 6
        std = math.sqrt(sum((x - mean) ** 2 for x in grp) / 5)
        for j in range(6):
            want = grp[j] - mean
            if scale == "group":
                want /= std + 1e-4
            elif scale == "batch":
                want /= all_std + 1e-4
            assert abs(adv[p * 6 + j].item() - want) < 1e-12


def test_zero_std_fraction():
    assert zero_std_fraction(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0]), 2) == pytest.approx(2 / 3)


def test_unknown_names_are_clear_errors():
    with pytest.raises(ValueError, match="scale_rewards='mean'.*group, batch, none"):
        grpo_advantages(torch.zeros(4), 2, "mean")
    with pytest.raises(ValueError, match="advantage='rloo' is not known; valid: grpo"):
        ADVANTAGES.get("rloo")
