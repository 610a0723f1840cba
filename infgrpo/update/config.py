"""UpdateConfig: how the policy update runs (``model.update``): iterations, micro-batch sizing, shared prompts.

None of these changes what is minimized (that is :class:`~infgrpo.algo.Objective`), only how the
update computes it: the same gradients up to rounding for any ``token_budget``, ``share_prompt`` or
``logit_chunk_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from infgrpo.runtime.memory import parse_memory
from infgrpo.settings import ConfigError, check_types
from infgrpo.update.budget import check_token_budget
from infgrpo.update.chunked_head import DEFAULT_LOGIT_CHUNK_TOKENS

SharePrompt = Literal["auto", "on", "off"]
"""``share_prompt``: 'auto' (on wherever it is exact for the model), 'on' (an error where not), 'off'."""
SkipZeroAdvantage = Literal["auto", "on", "off"]
"""``skip_zero_advantage``: 'auto' (on wherever it is exact for the objective), 'on' (an error where not), 'off'."""


@dataclass
class UpdateConfig:
    """The policy update after each rollout: ``num_iterations`` optimizer steps over token-budget micro-batches."""

    num_iterations: int = 1
    """Optimizer steps per rollout (TRL's ``num_iterations``, mu); > 1 reuses the rollout with old log-probs."""
    share_prompt: SharePrompt = "auto"
    """Run each prompt once per group in the update, its completions attending to its K/V (the same loss and
    gradients as prompt + completion rows, up to rounding; the prompt's time and activations are paid once,
    not G times). ``auto``: on wherever it is exact for the model (sdpa or eager attention, no sliding
    window its masks cannot carry, a probe at load), off with one line saying why elsewhere; ``on``: an error where it
    cannot be; ``off``: every row carries its prompt."""
    token_budget: int | Literal["auto"] = "auto"
    """Padded tokens per update micro-batch; bounds training memory for any batch x group size (the gradients
    do not depend on it). ``auto`` (the default): as many as ``update_memory`` holds, from a per-token cost of
    the model's activations plus one logit chunk (:mod:`infgrpo.update.budget`), planned per update from its
    longest sequence and printed; on a CPU at most 256 (a longer sequence gets a micro-batch of its own):
    there larger micro-batches cost memory and no time (SmolLM2-135M + LoRA, 4 x 8 completions: the same
    seconds a step at 256 and 512 tokens; at 4,096 the update's resident memory rose ~1.6x as much as at 256,
    ``benchmarks/RESULTS.md``), while on CUDA the largest micro-batch that fits is the fast one. On CUDA the
    plan is checked once against a measured peak (not the first update's, which allocates the optimizer
    state, nor one that ran out of memory). An integer fixes it. An update that runs out of device memory is
    retried on micro-batches of half the size (one process), and later updates keep the size that fit."""
    update_memory: int | float | str = 0.7
    """The update's memory budget under ``token_budget: auto``: bytes (an integer, or a string such as
    ``8GB``) or a float in (0, 1]: that share of the memory free when the first update starts (after the
    rollout; weights, gradients and optimizer state are outside it)."""
    logit_chunk_tokens: int = DEFAULT_LOGIT_CHUNK_TOKENS
    """Completion positions that go through the LM head at a time when computing log-probs (forward and
    backward recompute each chunk), so the update never holds logits for a whole micro-batch: extra memory
    ~ chunk x vocabulary x 8-12 bytes (0.6-0.9 GB at 512 positions and Qwen3's 151,936 tokens), at about
    the speed of full logits. 0 = full logits from the model's own forward (O(micro-batch x vocabulary)
    memory; needed for models that change their logits after the head, e.g. soft-capping)."""
    skip_zero_advantage: SkipZeroAdvantage = "auto"
    """Leave rows of advantage exactly 0 (e.g. every completion of a group whose rewards are all equal) out of
    the update's forward and backward: their gradient is exactly 0 under the objective, and every normalizer
    still counts them, so the update is the same (float64 tests: 1e-10) for less work; a group whose rows
    are all skipped does not run its prompt. ``auto``: on wherever that is exact (not with ``objective.beta >
    0`` or an entropy bonus: see :mod:`infgrpo.algo.zero_advantage`), off with one line saying why
    elsewhere; ``on``: an error where it is not exact; ``off``: every row runs. With the skip, ``entropy``,
    the clip ratios and the rollout mismatch are taken over the rows that ran (``update/rows_trained``)."""

    def __post_init__(self) -> None:
        check_token_budget(self.token_budget)  # its own message for any type
        parse_memory(self.update_memory, "update_memory")
        check_types(self)
        if self.num_iterations < 1:
            raise ConfigError(f"num_iterations={self.num_iterations} must be >= 1")
        if self.logit_chunk_tokens < 0:
            raise ConfigError(
                f"logit_chunk_tokens={self.logit_chunk_tokens!r} must be an integer >= 1 (positions through the "
                "LM head at a time) or 0 (full logits)"
            )
