"""Update sizing: how many tokens an update micro-batch may hold (``GRPOModule.token_budget: auto``).

The update's memory beyond the weights, gradients and optimizer state is the activations of one
micro-batch plus the LM head's logits. Per padded token, with hidden size H, MLP size I, L layers,
``a`` the bytes of the residual stream's dtype::

    layer_bytes  = (16 H + 4 I) a                      # saved for the backward in one decoder layer
    per_token    = L layer_bytes                        # every layer's activations kept, or
                 = L H a + layer_bytes                  # gradient checkpointing: layer inputs + one layer
                 + 3 H a                                # final hidden states, their gradient, the head input
                 + V (logit_bytes + 16) (full logits)   # logits kept, float32 log-softmax and gradients
    fixed        = 3 chunk V max(logit_bytes, 4)        # chunked head: one chunk's logits, float32 copy, grad
    token_budget = floor((budget - fixed) / per_token)

``16 H + 4 I`` counts a Llama/Qwen layer's saved tensors: norm inputs and outputs, q/k/v and their
normed and rotated copies, the attention output and o_proj's input/output (~10-12 H with grouped K/V),
and the MLP's gate, up, activation and product (4 I) with its input and output. There is no attention
term: torch's fused SDPA kernels (flash attention on CPU, flash or memory-efficient on CUDA) keep no
(T x T) scores for the backward, with or without a mask (checked on torch 2.13's CPU kernel: the saved
tensors are q, k, v, the output and the mask); ``attn_implementation="eager"`` would keep them.
Checked on CPU against ``bench step`` (42M Qwen3, 8 x 525 tokens, ``benchmarks/RESULTS.md``): the
chunked update is planned at 1.33 GiB and rose 1.00 GiB; full logits rose 11.6 GiB, 20 bytes per
logit, which the ``+ 16`` reproduces.

The budget (``update_memory``) is bytes (``"8GB"``) or a share of the memory free when the first
update starts, after the rollout (CUDA: free device memory plus what torch's allocator caches
unused). On CUDA the first update's measured peak is compared with the plan; when it is higher, the
per-token cost is re-estimated from the measurement and the budget lowered for later updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infgrpo.runtime.memory import free_memory, parse_memory


def parse_update_memory(value: int | float | str) -> int | float:
    """Validated ``update_memory``: bytes (int, or ``"8GB"``) or a share of free memory (float in (0, 1])."""
    return parse_memory(value, "update_memory")


def check_token_budget(token_budget: int | str) -> None:
    """Raises a ValueError naming ``token_budget`` unless it is an integer >= 1 or ``"auto"``."""
    if token_budget == "auto":
        return
    if isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 1:
        raise ValueError(
            f"token_budget={token_budget!r}; valid: an integer >= 1 (padded tokens per update micro-batch) or "
            "'auto' (as many as update_memory holds)"
        )


@dataclass(frozen=True)
class UpdateShape:
    """What the update's memory per token depends on, read from a model (see :func:`update_shape`)."""

    layers: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    act_bytes: int
    logit_bytes: int
    checkpointing: bool


def update_shape(model: torch.nn.Module) -> UpdateShape:
    """The :class:`UpdateShape` of a Hugging Face causal LM (plain, peft-wrapped or quantized)."""
    from infgrpo.sampler.model_support import text_config

    cfg = text_config(model.config)
    emb = model.get_input_embeddings().weight  # the residual stream's dtype (float32 after k-bit preparation)
    head = getattr(model.get_output_embeddings(), "weight", None)
    if head is None:  # peft-wrapped head
        head = model.get_output_embeddings().base_layer.weight
    layers = int(cfg.num_hidden_layers)
    return UpdateShape(
        layers=layers,
        hidden_size=int(cfg.hidden_size),
        intermediate_size=int(getattr(cfg, "intermediate_size", None) or 4 * cfg.hidden_size),
        vocab_size=int(cfg.vocab_size),
        act_bytes=torch.finfo(emb.dtype).bits // 8 if emb.is_floating_point() else 4,
        logit_bytes=torch.finfo(head.dtype).bits // 8 if head.is_floating_point() else 4,
        checkpointing=any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules()),
    )


@dataclass(frozen=True)
class TokenBudgetPlan:
    """The token budget chosen for a memory budget, and the bytes behind it."""

    token_budget: int
    per_token_bytes: int
    fixed_bytes: int
    budget_bytes: int
    max_len: int

    def planned_bytes(self, tokens: int) -> int:
        """Bytes the plan expects for a micro-batch of ``tokens`` padded tokens."""
        return self.fixed_bytes + tokens * self.per_token_bytes

    def describe(self) -> str:
        """One line for the log: the budget, the per-token and fixed costs behind it."""
        return (
            f"update micro-batches: token_budget {self.token_budget:,} = ({self.budget_bytes / 1e9:.2f} GB budget - "
            f"{self.fixed_bytes / 1e9:.2f} GB logit chunk) / {self.per_token_bytes / 1e3:,.1f} kB a token "
            f"(sequences up to {self.max_len:,} tokens)"
        )


def per_token_bytes(shape: UpdateShape, chunk_tokens: int) -> tuple[int, int]:
    """(bytes per padded token, fixed bytes) of an update micro-batch (formula in the module docstring)."""
    h, i, a = shape.hidden_size, shape.intermediate_size, shape.act_bytes
    layer = (16 * h + 4 * i) * a
    per_token = (shape.layers * h * a + layer) if shape.checkpointing else shape.layers * layer
    per_token += 3 * h * a
    if chunk_tokens == 0:
        return per_token + shape.vocab_size * (shape.logit_bytes + 16), 0
    return per_token, 3 * chunk_tokens * shape.vocab_size * max(shape.logit_bytes, 4)


def plan_token_budget(
    budget: int, shape: UpdateShape, max_len: int, chunk_tokens: int, per_token: int | None = None
) -> TokenBudgetPlan:
    """The most padded tokens per micro-batch within ``budget`` bytes (``per_token`` overrides the estimate).

    Raises a ValueError naming ``update_memory`` when not even one sequence of ``max_len`` tokens fits.
    """
    estimate, fixed = per_token_bytes(shape, chunk_tokens)
    per_token = per_token or estimate
    tokens = (budget - fixed) // per_token
    if tokens < max_len:
        raise ValueError(
            f"update_memory gives {budget:,} bytes for the update, too small for one sequence of {max_len:,} tokens: "
            f"that needs {fixed + max_len * per_token:,} bytes ({fixed:,} for a logit chunk + {per_token:,} a token). "
            "Raise update_memory, lower logit_chunk_tokens or max_new_tokens, enable gradient_checkpointing, or "
            "set token_budget to an integer."
        )
    return TokenBudgetPlan(int(tokens), int(per_token), int(fixed), int(budget), int(max_len))


class UpdateSizer:
    """``token_budget`` for each update: the configured integer, or under 'auto' the plan for ``update_memory``.

    The byte budget is fixed at the first update (a share of the memory free then, after the rollout);
    the plan is made per update from its longest sequence and printed whenever it changes. After the
    first update on CUDA, :meth:`observe` compares the measured peak with the plan.
    """

    def __init__(self, token_budget: int | str, update_memory: int | float | str, chunk_tokens: int) -> None:
        check_token_budget(token_budget)
        self.token_budget, self.update_memory, self.chunk_tokens = token_budget, update_memory, chunk_tokens
        if token_budget == "auto":
            parse_update_memory(update_memory)
        self.budget: int | None = None
        self.plan: TokenBudgetPlan | None = None
        self.measured_per_token: int | None = None

    def tokens(self, model: torch.nn.Module, max_len: int) -> int:
        """The token budget for an update whose longest sequence has ``max_len`` tokens."""
        if self.token_budget != "auto":
            return int(self.token_budget)
        if self.budget is None:
            self.budget = self._budget_bytes(next(model.parameters()).device)
        plan = plan_token_budget(self.budget, update_shape(model), max_len, self.chunk_tokens, self.measured_per_token)
        if self.plan is None or plan.token_budget != self.plan.token_budget:
            print(f"[infgrpo] {plan.describe()}")
        self.plan = plan
        return plan.token_budget

    def observe(self, peak_rise_bytes: int, tokens: int) -> None:
        """Checks the plan against an update whose largest micro-batch had ``tokens`` padded tokens and whose
        peak rose ``peak_rise_bytes`` above the memory at its start; a higher measurement lowers later budgets."""
        if self.plan is None or self.measured_per_token is not None or tokens < 1:
            return
        planned = self.plan.planned_bytes(tokens)
        if peak_rise_bytes > planned:
            self.measured_per_token = -(-(peak_rise_bytes - self.plan.fixed_bytes) // tokens)
            print(
                f"[infgrpo] update memory: {peak_rise_bytes / 1e9:.2f} GB measured for {tokens:,} tokens, "
                f"{planned / 1e9:.2f} GB planned; later budgets use {self.measured_per_token / 1e3:,.1f} kB a token"
            )
        else:
            self.measured_per_token = self.plan.per_token_bytes
            print(
                f"[infgrpo] update memory: {peak_rise_bytes / 1e9:.2f} GB measured for {tokens:,} tokens, "
                f"within the {planned / 1e9:.2f} GB planned"
            )

    def state_dict(self) -> dict[str, int | None]:
        """What the first update fixed (the byte budget) and measured (CUDA: bytes a token), so a resumed run
        plans its micro-batches as the uninterrupted one would."""
        return {"update_budget_bytes": self.budget, "update_measured_per_token": self.measured_per_token}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (missing keys, from older checkpoints, leave it unfixed)."""
        self.budget = state.get("update_budget_bytes")
        self.measured_per_token = state.get("update_measured_per_token")

    def _budget_bytes(self, device: torch.device) -> int:
        """``update_memory`` in bytes: itself, or its share of the memory free now (plus torch's unused cache)."""
        value = parse_update_memory(self.update_memory)
        if isinstance(value, int):
            return value
        free = free_memory(device)
        if device.type == "cuda":
            free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(value * free)
