"""Validation of ``GRPOModule``'s settings, before anything is loaded: each error names the field and what is valid.

threads, objective = check_hparams(hp)   # ValueError on the first bad setting; warnings for risky pairs
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

from infgrpo.algo import ADVANTAGES, Objective
from infgrpo.algo.advantages import check_scale_rewards
from infgrpo.models import check_dtype, check_loading
from infgrpo.rewards import check_rewards
from infgrpo.rewards.core import check_on_error
from infgrpo.runtime.threads import Threads, check_threads
from infgrpo.training.optim import check_lr_schedule
from infgrpo.update.budget import check_token_budget, parse_update_memory


def check_hparams(hp: Mapping[str, Any]) -> tuple[Threads, Objective]:
    """Raises a ValueError naming the first invalid setting of ``hp`` (GRPOModule's arguments by name, with
    ``rewards`` resolved); returns the normalized ``threads`` ('auto' or an integer) and the objective (its
    fields are GRPOModule's of the same names, TRL's)."""
    group_size = hp["group_size"]
    if not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size={group_size!r} must be an integer >= 2 (GRPO compares samples of a group)")
    if hp["num_iterations"] < 1:
        raise ValueError(f"num_iterations={hp['num_iterations']} must be >= 1")
    check_lr_schedule(hp["lr_scheduler_type"])
    check_token_budget(hp["token_budget"])
    if hp["token_budget"] == "auto":
        parse_update_memory(hp["update_memory"])
    chunk = hp["logit_chunk_tokens"]
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
        raise ValueError(
            f"logit_chunk_tokens={chunk!r} must be an integer >= 1 (positions through the LM head at a time) "
            "or 0 (full logits)"
        )
    check_on_error(hp["reward_on_error"])
    rewards, accuracy_reward = hp["rewards"], hp["accuracy_reward"]
    if accuracy_reward is not None and accuracy_reward not in rewards:
        raise ValueError(f"accuracy_reward={accuracy_reward!r} must be one of rewards: {', '.join(rewards)}")
    ADVANTAGES.check(hp["advantage"])
    check_scale_rewards(hp["scale_rewards"])
    check_dtype(hp["dtype"])
    check_loading(hp["lora_r"], hp["load_in_4bit"], hp["bnb_4bit_quant_type"], hp["bnb_4bit_compute_dtype"])
    check_rewards(rewards)
    objective = Objective(**{f.name: hp[f.name] for f in dataclasses.fields(Objective)})  # ranges, combinations
    warn_filtered_behaviour_logprobs(hp.get("sampler"), objective)
    return check_threads(hp["threads"], "threads"), objective


def warn_filtered_behaviour_logprobs(sampler: Any, objective: Objective) -> None:
    """Warns when the behaviour log-probs a correction reads are not of the distribution the others decode.

    ``decoder: hf_cb`` returns log-probs after top-k / top-p filtering, every other decoder before it (the
    tempered distribution the training forward recomputes): with truncation on, ``rollout_correction`` and
    ``off_policy_mask_threshold`` then weigh or drop tokens by a ratio that includes the truncation.
    """
    if getattr(sampler, "decoder", None) != "hf_cb" or (not sampler.top_k and sampler.top_p >= 1.0):
        return
    corrects = objective.rollout_correction != "none" or objective.off_policy_mask_threshold is not None
    if corrects:
        warnings.warn(
            f"sampler.decoder='hf_cb' with top_k={sampler.top_k}, top_p={sampler.top_p}: its behaviour log-probs are "
            f"taken after the filtering, so rollout_correction={objective.rollout_correction!r} and "
            f"off_policy_mask_threshold={objective.off_policy_mask_threshold!r} see the truncation as a mismatch "
            "(decoder 'engine' reports the unfiltered tempered log-probs the update recomputes)",
            UserWarning,
            stacklevel=3,
        )
