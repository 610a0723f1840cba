"""Every prompt of a run checked against the model's context before the first step, not when its batch comes up.

    check_data_prompts(policy, trainer.datamodule, max_new_tokens)   # in GRPOModule.on_fit_start

A prompt whose length plus ``sampler.max_new_tokens`` exceeds the context would otherwise stop the run at the
step that draws it (hours in, on a real run). Data modules without ``train_items`` / ``eval_items`` (plain
dataloaders) are left to the sampler's own check at each rollout.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedModel

from infgrpo.sampler.model_support import check_prompts


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
                f"{split} prompts: {err} (set data.max_prompt_length with data.long_prompts: skip to drop such prompts)"
            ) from err
