"""What the Python API checks against the loaded model and the data module as fit starts, before the first step.

    check_data_prompts(policy, trainer.datamodule, max_new_tokens)   # a step of preflight.door's STEPS
    check_reward_rows({"trl.rewards:accuracy_reward": 1.0}, trainer.datamodule)   # likewise
    move_reward_models({"trl.rewards:accuracy_reward": 1.0}, device, torch.bfloat16)   # GRPOModule.on_fit_start
    warn_slow_cpu_dtype(PolicyConfig(dtype="bfloat16"), QuantizationConfig(), device)    # likewise

Every prompt of a run is checked against the model's context here, not when its batch comes up: a prompt whose
length plus ``sampler.max_new_tokens`` exceeds the context would otherwise stop the run at the step that draws it
(hours in, on a real run). Data modules without ``train_items`` / ``eval_items`` (plain dataloaders) are left to
the sampler's own check at each rollout.

A TRL-convention reward that needs a dataset column (``accuracy_reward`` reads ``solution``), or chat-message
completions, is checked against the training and the held-out rows here, before the first rollout (the command line
checks the first rows even earlier, before the model loads); a sequence-classification reward model moves to the
policy's device and dtype.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from transformers import PreTrainedModel

from infgrpo.policy.config import PolicyConfig, QuantizationConfig
from infgrpo.rewards import resolve_reward
from infgrpo.rewards.signature import check_reward_data
from infgrpo.runtime.hardware import cpu_flags, slow_cpu_dtype
from infgrpo.sampler.model_support import check_prompts
from infgrpo.settings import InfgrpoWarning


def check_data_prompts(model: PreTrainedModel, datamodule: Any, max_new_tokens: int) -> None:
    """Raises the sampler's ValueError (the prompt's tokens, the positions it needs, the context and what to
    lower) for the first prompt of the training or held-out items that cannot fit, naming its split and row."""
    for split, items in (
        ("training", getattr(datamodule, "train_items", None)),
        ("held-out", getattr(datamodule, "eval_items", None)),
    ):
        if not items:
            continue
        try:
            check_prompts(model, [item["prompt_ids"] for item in items], max_new_tokens)
        except ValueError as err:
            raise ValueError(
                f"{split} prompts: {err} (set data.max_prompt_length with data.long_prompts: skip to drop such "
                "prompts; data.system_prompt is in every prompt)"
            ) from err


def check_reward_rows(functions: dict[str, float], datamodule: Any) -> None:
    """Raises a ConfigError naming the reward and the rows (training or held-out, the first 64 of each) it cannot
    score: a column they lack, or string prompts for a reward that reads chat messages."""
    for where, attribute in (("the training split", "train_items"), ("the held-out split", "eval_items")):
        items = (getattr(datamodule, attribute, None) or [])[:64]
        if items:
            check_reward_data(functions, [item["meta"] for item in items], [item["prompt"] for item in items], where)


def move_reward_models(functions: dict[str, float], device: torch.device, dtype: torch.dtype) -> None:
    """Moves every reward model among ``functions`` to ``device`` in ``dtype``."""
    from infgrpo.rewards.reward_model import RewardModel

    for name in functions:
        fn = resolve_reward(name)
        if isinstance(fn, RewardModel):
            fn.to(device, dtype)


def warn_slow_cpu_dtype(policy: PolicyConfig, quantization: QuantizationConfig, device: torch.device) -> None:
    """Warns once (rank 0) when the weights' compute dtype has no native support on this CPU (see
    :func:`~infgrpo.runtime.hardware.slow_cpu_dtype`); nothing on other devices."""
    q = quantization
    slow = slow_cpu_dtype(q.bnb_4bit_compute_dtype if q.load_in_4bit else policy.dtype, cpu_flags())
    if device.type == "cpu" and slow:
        rank_zero_warn(f"[infgrpo] {slow}", category=InfgrpoWarning)
