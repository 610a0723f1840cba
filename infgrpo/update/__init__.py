"""The policy update: token-budget micro-batches, log-probs and gradient accumulation."""

from infgrpo.update.batching import Frozen, MicroBatch, collate, pack_by_token_budget, split_rows
from infgrpo.update.logprobs import completion_logprobs
from infgrpo.update.step import (
    GradientStep,
    LossConfig,
    accumulate_policy_gradients,
    frozen_logprobs,
    prepare_microbatches,
    split_microbatches,
)

__all__ = [
    "Frozen",
    "GradientStep",
    "LossConfig",
    "MicroBatch",
    "accumulate_policy_gradients",
    "collate",
    "completion_logprobs",
    "frozen_logprobs",
    "pack_by_token_budget",
    "prepare_microbatches",
    "split_microbatches",
    "split_rows",
]
