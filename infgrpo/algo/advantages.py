"""Group-relative advantages (GRPO), as pure tensor functions chosen by name.

The TRL-compatible estimator ``grpo``: rewards are reshaped into groups of ``group_size`` samples of
one prompt (prompt-major order), the *group* mean is subtracted, and the result is divided by an
unbiased standard deviation + 1e-4 chosen by ``scale_rewards``:

- ``group``: the std of each group's rewards (TRL's default);
- ``batch``: the std of all rewards in the generation batch (over every data-parallel rank:
  pass them as ``batch_rewards``);
- ``none``:  no division (Dr. GRPO's recommendation).
"""

from __future__ import annotations

import torch

from infgrpo.registry import Registry

ADVANTAGES = Registry("advantage")
SCALE_REWARDS = ("group", "batch", "none")
STD_EPS = 1e-4


def check_scale_rewards(scale_rewards: str) -> str:
    """Validates ``scale_rewards`` (group, batch or none) and returns it."""
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards={scale_rewards!r} is not known; valid: {', '.join(SCALE_REWARDS)}")
    return scale_rewards


@ADVANTAGES.register("grpo")
def grpo_advantages(
    rewards: torch.Tensor, group_size: int, scale_rewards: str = "group", batch_rewards: torch.Tensor | None = None
) -> torch.Tensor:
    """Advantages of ``rewards`` (N,) with N = num_prompts * group_size, prompt-major -> (N,).

    ``adv_i = (r_i - mean(group(i))) / (std + 1e-4)`` with the std chosen by ``scale_rewards``.
    ``batch_rewards`` (M,): the whole generation batch whose std ``batch`` uses, when ``rewards``
    are one rank's share of it (default: ``rewards``).
    """
    check_scale_rewards(scale_rewards)
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"group_size={group_size} does not divide the {rewards.numel()} rewards")
    grouped = rewards.view(-1, group_size)  # (P, G)
    centered = (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)  # (N,)
    if scale_rewards == "none":
        return centered
    if scale_rewards == "group":
        std = grouped.std(dim=1).repeat_interleave(group_size)  # (N,) unbiased, as torch.std
    else:
        whole = rewards if batch_rewards is None else batch_rewards.to(rewards)
        std = whole.std().expand_as(rewards)
    return centered / (std + STD_EPS)


def zero_std_fraction(rewards: torch.Tensor, group_size: int) -> float:
    """Share of groups whose rewards are all equal (they carry no learning signal)."""
    grouped = rewards.view(-1, group_size)
    return (grouped.max(dim=1).values == grouped.min(dim=1).values).float().mean().item()
