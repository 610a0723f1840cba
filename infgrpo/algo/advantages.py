"""Group-relative advantages (GRPO), as pure tensor functions chosen by name.

The TRL-compatible estimator ``grpo``: rewards are reshaped into groups of ``group_size`` samples of
one prompt (prompt-major order), the *group* mean is subtracted, and the result is divided by an
unbiased standard deviation + 1e-4 chosen by ``scale_rewards``:

- ``group``: the std of each group's rewards (TRL's default);
- ``batch``: the std of all rewards in the generation batch (over every data-parallel rank:
  pass them as ``batch_rewards``);
- ``none``:  no division (Dr. GRPO's recommendation).

Unscorable rows (NaN: no reward function applied to them, or every one failed under ``rewards.on_error: skip``)
are handled as TRL 1.16 does: they are left out of the group mean and of every std (NaN-aware statistics), and
their advantage is 0. A group with fewer than two scored rows has no std and gives every row advantage 0 (with
``scale_rewards`` ``group``); without NaN these are exactly the plain mean and unbiased std.
"""

from __future__ import annotations

from typing import Literal

import torch

from infgrpo.registry import Registry, check_choice, choices

ADVANTAGES = Registry("advantage")
ScaleRewards = Literal["group", "batch", "none"]
"""Which std divides the centered rewards (TRL's ``scale_rewards``)."""
STD_EPS = 1e-4


def check_scale_rewards(scale_rewards: str) -> str:
    """Validates ``scale_rewards`` (group, batch or none) and returns it."""
    return check_choice("scale_rewards", scale_rewards, choices(ScaleRewards))


def nanstd(values: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Unbiased std of ``values`` over ``dim`` (all when None), NaN left out; NaN below two values (TRL's)."""
    mean = torch.nanmean(values, dim=dim, keepdim=True)
    count = (~values.isnan()).sum(dim=dim)
    squares = ((values - mean) ** 2).nansum(dim=dim)
    return torch.where(count > 1, (squares / (count - 1).clamp(min=1)).sqrt(), torch.nan)


@ADVANTAGES.register("grpo")
def grpo_advantages(
    rewards: torch.Tensor, group_size: int, scale_rewards: str = "group", batch_rewards: torch.Tensor | None = None
) -> torch.Tensor:
    """Advantages of ``rewards`` (N,) with N = num_prompts * group_size, prompt-major -> (N,).

    ``adv_i = (r_i - mean(group(i))) / (std + 1e-4)`` with the std chosen by ``scale_rewards``.
    ``batch_rewards`` (M,): the whole generation batch whose std ``batch`` uses, when ``rewards``
    are one rank's share of it (default: ``rewards``). NaN rewards (failed) are left out of every mean
    and std and get advantage 0.
    """
    check_scale_rewards(scale_rewards)
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"group_size={group_size} does not divide the {rewards.numel()} rewards")
    grouped = rewards.view(-1, group_size)  # (P, G)
    centered = (grouped - torch.nanmean(grouped, dim=1, keepdim=True)).reshape(-1)  # (N,), NaN where failed
    if scale_rewards == "group":
        centered = centered / (nanstd(grouped, dim=1).repeat_interleave(group_size) + STD_EPS)  # unbiased
    elif scale_rewards == "batch":
        whole = rewards if batch_rewards is None else batch_rewards.to(rewards)
        centered = centered / (nanstd(whole) + STD_EPS)
    return torch.nan_to_num(centered, nan=0.0)  # failed rows (and groups without a std) carry no signal


def zero_std_fraction(rewards: torch.Tensor, group_size: int) -> float:
    """Share of groups whose scored rewards are all equal, or fewer than two (they carry no learning signal).

    NaN rewards (failed) are left out.
    """
    grouped = rewards.view(-1, group_size)  # (P, G)
    scored = ~grouped.isnan()
    high = torch.where(scored, grouped, -torch.inf).max(dim=1).values
    low = torch.where(scored, grouped, torch.inf).min(dim=1).values
    return ((high == low) | (scored.sum(dim=1) < 2)).float().mean().item()
