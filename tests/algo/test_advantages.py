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


NAN = float("nan")


def test_failed_rewards_are_left_out_of_the_group_statistics_like_trl():
    # rewards [1, fail, 0, 1]: mean of the scored rows 2/3, unbiased std sqrt(1/3)
    adv = grpo_advantages(torch.tensor([1.0, NAN, 0.0, 1.0]), group_size=4, scale_rewards="group")
    std = (1 / 3) ** 0.5 + 1e-4
    assert adv.tolist() == pytest.approx([(1 / 3) / std, 0.0, (-2 / 3) / std, (1 / 3) / std])
    # the same failure scored 0 ("zero") enters the statistics: mean 1/2, std sqrt(1/3), pushed down
    zero = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=4, scale_rewards="group")
    assert zero[1].item() == pytest.approx(-0.5 / std, abs=1e-4) and zero[1].item() == pytest.approx(-0.866, abs=1e-3)


def test_failed_rewards_with_batch_and_no_scaling():
    r = torch.tensor([1.0, NAN, 3.0, 0.0, 2.0, NAN])  # two groups of 3
    none = grpo_advantages(r, group_size=3, scale_rewards="none")
    assert none.tolist() == pytest.approx([-1.0, 0.0, 1.0, -1.0, 1.0, 0.0])
    batch = grpo_advantages(r, group_size=3, scale_rewards="batch")
    std = torch.tensor([1.0, 3.0, 0.0, 2.0]).std().item() + 1e-4  # the scored rows of the whole batch
    assert batch.tolist() == pytest.approx([-1 / std, 0.0, 1 / std, -1 / std, 1 / std, 0.0])


def test_a_group_with_one_scored_reward_carries_no_signal():
    adv = grpo_advantages(torch.tensor([NAN, 1.0, NAN, 0.0, 1.0, 1.0]), group_size=3, scale_rewards="group")
    assert adv[:3].tolist() == [0.0, 0.0, 0.0]
    assert not adv.isnan().any()
    assert zero_std_fraction(torch.tensor([NAN, 1.0, NAN, 0.0, 1.0, NAN]), 3) == pytest.approx(0.5)
