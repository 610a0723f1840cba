"""Pool sizing: how many slots fit a rollout memory budget (``SamplerConfig.num_slots: auto``).

With ``T = longest prompt + max_new_tokens`` positions per slot, ``V`` the vocabulary, ``S`` slots::

    kv_per_slot        = 2 * layers * kv_heads * head_dim * dtype_bytes * T        # K and V, all layers
    workspace_per_slot = V * (2 * logits_bytes + n_vocab * sample_bytes)           # one decode step
                       + 2 * attention_heads * T * 4                               # scores, probabilities
    prompt_kv          = 2 * layers * kv_heads * head_dim * dtype_bytes * sum(prompt lengths)
    S = floor((budget - prompt_kv) / (kv_per_slot + workspace_per_slot))

The decode-step workspace is the live set at the sampling peak
(:func:`~infgrpo.sampler.engine.sampling.sample_tokens` on the (S, V) logits): the model's logits and their
gather to the running slots (``2 * logits_bytes``), then ``n_vocab`` vectors of the sampling dtype (float32,
float64 for float64 models): the upcast or tempered logits, the softmax cumulated in place into the CDF, the
temporary of ``logsumexp`` and one spare = 4; top-k adds the masked copy (+1); top-p adds a sort
(values, int64 indices = 2 floats), two softmaxes, the cumulative sum and its shifted copy (+6).
Hidden activations of one token per slot (``hidden`` and ``intermediate`` sizes) are small beside the
vocabulary and are covered by the spare vector. ``prompt_kv`` bounds the prefilled prompt K/V the
engine holds while samples of a prompt wait (at most every prompt of the batch at once).
Not counted: the model weights, the optimizer, and the transient activations of prefilling one
prompt (for long prompts on an eager/"math" attention kernel they grow as L^2: leave a margin).
Measured on a 42M Qwen3 (``benchmarks/RESULTS.md``, CUDA allocator and CPU RSS): the rollout peaks
at 0.70-0.72 of the plan; 4 float32 vocabulary vectors a slot are live at once, 6 are reserved.

The budget (``rollout_memory``) is bytes (an int, or a string such as ``"4GB"`` / ``"512MiB"``) or a
float in (0, 1]: that share of the memory free when the first rollout starts (CUDA:
``torch.cuda.mem_get_info``; CPU: ``MemAvailable`` of ``/proc/meminfo``, or psutil).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infgrpo.runtime.memory import budget_bytes
from infgrpo.sampler.engine.slot_pool import pool_width
from infgrpo.sampler.model_support import kv_bytes_per_token, kv_dtype, text_config

SAMPLING_VECTORS = 4
TOP_K_VECTORS = 1
TOP_P_VECTORS = 6


@dataclass(frozen=True)
class PoolShape:
    """What the pool's memory depends on, read from a model (see :func:`pool_shape`)."""

    kv_bytes_per_token: int
    vocab_size: int
    attention_heads: int
    logits_bytes: int
    sample_bytes: int


@dataclass(frozen=True)
class PoolPlan:
    """The slot count chosen for a budget, and the bytes behind it."""

    num_slots: int
    max_len: int
    kv_bytes_per_slot: int
    workspace_bytes_per_slot: int
    prompt_kv_bytes: int
    budget_bytes: int

    @property
    def slot_bytes(self) -> int:
        """Bytes of one slot: its K/V plus its share of the decode-step workspace."""
        return self.kv_bytes_per_slot + self.workspace_bytes_per_slot

    @property
    def total_bytes(self) -> int:
        """Bytes the plan uses: every slot plus the prompts' K/V."""
        return self.num_slots * self.slot_bytes + self.prompt_kv_bytes

    def describe(self) -> str:
        """One line for the log: slots, tokens a slot, planned bytes against the budget and their breakdown."""
        return (
            f"rollout pool: {self.num_slots} slots x {self.max_len:,} tokens = {self.total_bytes / 1e9:.2f} GB "
            f"of {self.budget_bytes / 1e9:.2f} GB budget ({self.slot_bytes / 1e6:,.1f} MB a slot: "
            f"{self.kv_bytes_per_slot / 1e6:,.1f} K/V + {self.workspace_bytes_per_slot / 1e6:,.1f} decode workspace; "
            f"{self.prompt_kv_bytes / 1e6:,.1f} MB prompt K/V)"
        )


def pool_shape(model: torch.nn.Module) -> PoolShape:
    """The :class:`PoolShape` of a Hugging Face causal LM (plain, peft-wrapped or quantized)."""
    cfg = text_config(model.config)
    head_weight = getattr(model.get_output_embeddings(), "weight", None)
    floating = head_weight is not None and head_weight.is_floating_point()
    logits_bytes = torch.finfo(head_weight.dtype if floating else kv_dtype(model)).bits // 8
    return PoolShape(
        kv_bytes_per_token=kv_bytes_per_token(model),
        vocab_size=int(cfg.vocab_size),
        attention_heads=int(cfg.num_attention_heads),
        logits_bytes=logits_bytes,
        sample_bytes=max(4, logits_bytes),
    )


def plan_pool(
    budget: int,
    shape: PoolShape,
    max_len: int,
    prompt_tokens: int,
    top_k: int = 0,
    top_p: float = 1.0,
    rollout_memory: int | float | str | None = None,
) -> PoolPlan:
    """The most slots of ``max_len`` positions that fit ``budget`` bytes (formula in the module docstring).

    ``prompt_tokens``: the prompt tokens whose K/V may be held at once (the batch's total).
    Raises a ValueError naming ``rollout_memory`` (the setting the budget came from) when not even
    one slot fits.
    """
    vectors = SAMPLING_VECTORS + (TOP_K_VECTORS if top_k > 0 else 0) + (TOP_P_VECTORS if top_p < 1.0 else 0)
    kv = shape.kv_bytes_per_token * max_len
    workspace = shape.vocab_size * (2 * shape.logits_bytes + vectors * shape.sample_bytes)
    workspace += 2 * shape.attention_heads * max_len * 4
    prompt_kv = shape.kv_bytes_per_token * prompt_tokens
    slots = (budget - prompt_kv) // (kv + workspace)
    if slots < 1:
        raise ValueError(
            f"rollout_memory={rollout_memory!r} gives a budget of {budget:,} bytes, too small for one slot: a slot "
            f"of {max_len:,} tokens needs {kv + workspace:,} bytes ({kv:,} K/V + {workspace:,} decode workspace) plus "
            f"{prompt_kv:,} for the prompts' K/V, {kv + workspace + prompt_kv:,} in all. Raise rollout_memory, "
            "lower max_new_tokens, or set num_slots to an integer."
        )
    return PoolPlan(int(slots), max_len, kv, workspace, prompt_kv, budget)


class PoolSizer:
    """``num_slots`` for each rollout: the configured integer, or under 'auto' the plan for the budget.

    The budget is fixed at the first rollout (a share of the memory free then); the slots are planned
    per rollout from its prompts, so a batch of longer prompts gets fewer slots and the budget holds
    for every batch. The plan is printed when it first appears and whenever the slot count changes.
    The completions never depend on the slot count (per-sequence random streams).
    """

    def __init__(
        self,
        num_slots: int | str,
        rollout_memory: int | float | str,
        max_new_tokens: int,
        top_k: int = 0,
        top_p: float = 1.0,
    ) -> None:
        self.num_slots, self.rollout_memory = num_slots, rollout_memory
        self.max_new_tokens, self.top_k, self.top_p = max_new_tokens, top_k, top_p
        self.budget: int | None = None
        self.plan: PoolPlan | None = None

    def slots(self, model: torch.nn.Module, prompt_ids: list[list[int]]) -> int:
        """Slots for decoding ``prompt_ids`` with ``model``."""
        if self.num_slots != "auto":
            return int(self.num_slots)
        if self.budget is None:
            self.budget = budget_bytes(self.rollout_memory, next(model.parameters()).device)
        max_len = pool_width(max(map(len, prompt_ids)) + self.max_new_tokens)  # as the engine allocates it
        prompt_tokens = sum(map(len, prompt_ids))
        plan = plan_pool(
            self.budget, pool_shape(model), max_len, prompt_tokens, self.top_k, self.top_p, self.rollout_memory
        )
        if self.plan is None or plan.num_slots != self.plan.num_slots:
            print(f"[infgrpo] {plan.describe()}")
        self.plan = plan
        return plan.num_slots
