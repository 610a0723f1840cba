"""Validation of ``GRPOModule``'s settings, before anything is loaded: each error names the field and what is valid.

threads = check_hparams(module.hparams)   # raises ValueError on the first bad setting
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infgrpo.algo import ADVANTAGES, KL_ESTIMATORS, LOSS_TYPES
from infgrpo.algo.advantages import check_scale_rewards
from infgrpo.models import check_dtype, check_loading
from infgrpo.rewards import check_rewards
from infgrpo.rewards.core import check_on_error
from infgrpo.runtime.threads import Threads, check_threads
from infgrpo.update.budget import check_token_budget, parse_update_memory


def check_hparams(hp: Mapping[str, Any]) -> Threads:
    """Raises a ValueError naming the first invalid setting of ``hp`` (GRPOModule's arguments by name, with
    ``rewards`` resolved); returns the normalized ``threads`` ('auto' or an integer)."""
    group_size = hp["group_size"]
    if not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size={group_size!r} must be an integer >= 2 (GRPO compares samples of a group)")
    if hp["num_iterations"] < 1:
        raise ValueError(f"num_iterations={hp['num_iterations']} must be >= 1")
    check_token_budget(hp["token_budget"])
    if hp["token_budget"] == "auto":
        parse_update_memory(hp["update_memory"])
    chunk = hp["logit_chunk_tokens"]
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
        raise ValueError(
            f"logit_chunk_tokens={chunk!r} must be an integer >= 1 (positions through the LM head at a time) "
            "or 0 (full logits)"
        )
    if hp["epsilon_low"] < 0 or hp["epsilon_high"] < 0:
        raise ValueError(f"epsilon_low={hp['epsilon_low']}, epsilon_high={hp['epsilon_high']} must be >= 0")
    if hp["beta"] < 0:
        raise ValueError(f"beta={hp['beta']} must be >= 0")
    check_on_error(hp["reward_on_error"])
    rewards, accuracy_reward = hp["rewards"], hp["accuracy_reward"]
    if accuracy_reward is not None and accuracy_reward not in rewards:
        raise ValueError(f"accuracy_reward={accuracy_reward!r} must be one of rewards: {', '.join(rewards)}")
    ADVANTAGES.check(hp["advantage"])
    LOSS_TYPES.check(hp["loss_type"])
    KL_ESTIMATORS.check(hp["kl_estimator"])
    check_scale_rewards(hp["scale_rewards"])
    check_dtype(hp["dtype"])
    check_loading(hp["lora_r"], hp["load_in_4bit"], hp["bnb_4bit_quant_type"], hp["bnb_4bit_compute_dtype"])
    check_rewards(rewards)
    return check_threads(hp["threads"], "threads")
