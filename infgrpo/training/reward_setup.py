"""The reward functions met with the data and the device when fit starts: needed columns, reward models placed.

    prepare_rewards({"trl.rewards:accuracy_reward": 1.0}, trainer.datamodule, device, torch.bfloat16)

A TRL-convention reward that needs a dataset column (``accuracy_reward`` reads ``solution``) is checked against
the training rows' columns here, before the first rollout (the command line checks the first rows even earlier,
before the model loads); a sequence-classification reward model moves to the policy's device and dtype.
"""

from __future__ import annotations

from typing import Any

import torch

from infgrpo.rewards import resolve_reward
from infgrpo.rewards.signature import check_reward_columns


def prepare_rewards(functions: dict[str, float], datamodule: Any, device: torch.device, dtype: torch.dtype) -> None:
    """Raises a ConfigError naming the reward and the column its rows lack; moves every reward model to ``device``
    in ``dtype``."""
    items = getattr(datamodule, "train_items", None)
    if items:
        columns = dict.fromkeys(k for item in items[:64] for k in item["meta"])
        check_reward_columns(functions, columns, "the training rows")
    from infgrpo.rewards.reward_model import RewardModel

    for name in functions:
        fn = resolve_reward(name)
        if isinstance(fn, RewardModel):
            fn.to(device, dtype)
