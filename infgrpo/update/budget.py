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
unused; a CPU: available system memory). On a CPU the plan is also capped at
:data:`CPU_TOKEN_BUDGET` padded tokens (a longer sequence gets a micro-batch of its own, as under an
integer budget; memory is still checked for one sequence of the longest): a CPU's matrix products run
at full speed from a few hundred rows, so larger micro-batches cost memory and no time
(``benchmarks/RESULTS.md``: SmolLM2-135M + LoRA, 4 x 8 completions, the same seconds a step at 256
and 512 tokens; the update's resident memory rose about 1.6x as much at 4,096 as at 256). CUDA is not
capped: there a micro-batch as large as the memory holds is the fast one.

On CUDA an update's measured peak is compared with the plan (:meth:`UpdateSizer.observe`), once,
on the first update that measures the per-token cost and nothing else: not the first update of a
process (its optimizer step allocates AdamW's state, its backward the gradients, both outside the
budget and not per token) and not an update that ran out of memory (its peak includes the failed
attempt, near the device's capacity). When the measurement is higher, the per-token cost is
re-estimated from it and later budgets lowered; a measured cost never makes the plan fail (at worst
one sequence a micro-batch, which the update's out-of-memory retry guards).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infgrpo.runtime.memory import free_memory, parse_memory

CPU_TOKEN_BUDGET = 256
"""The most padded tokens ``token_budget: auto`` puts in an update micro-batch on a CPU (see the module docstring)."""


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
    cap: int | None = None
    """The cap that set ``token_budget`` (a CPU's :data:`CPU_TOKEN_BUDGET`), None when the memory did."""
    measured: bool = False
    """``per_token_bytes`` comes from a measured peak (:meth:`UpdateSizer.observe`) above the estimate."""

    def planned_bytes(self, tokens: int) -> int:
        """Bytes the plan expects for a micro-batch of ``tokens`` padded tokens."""
        return self.fixed_bytes + tokens * self.per_token_bytes

    def describe(self) -> str:
        """One line for the log: the budget and the per-token and fixed costs behind it (and a cap that applied)."""
        formula = (
            f"({self.budget_bytes / 1e9:.2f} GB budget - {self.fixed_bytes / 1e9:.2f} GB logit chunk) / "
            f"{self.per_token_bytes / 1e3:,.1f} kB a token{' (measured)' if self.measured else ''}"
        )
        fits = max(0, (self.budget_bytes - self.fixed_bytes) // self.per_token_bytes)
        if self.cap is not None:
            why = f"the CPU cap (larger micro-batches cost memory, not time; the memory holds {fits:,} = {formula})"
        elif fits < self.token_budget:
            why = f"one sequence ({formula} = {fits:,} by the measured cost)"
        else:
            why = formula
        tokens, longest = f"{self.token_budget:,}", f"{self.max_len:,}"
        return f"update micro-batches: token_budget {tokens} = {why} (sequences up to {longest} tokens)"


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
    budget: int,
    shape: UpdateShape,
    max_len: int,
    chunk_tokens: int,
    per_token: int | None = None,
    cap: int | None = None,
) -> TokenBudgetPlan:
    """The most padded tokens per micro-batch within ``budget`` bytes, at most ``cap``.

    ``per_token``: a measured cost (:meth:`UpdateSizer.observe`) instead of the estimate. By the estimate,
    raises a ValueError naming ``update_memory`` when not even one sequence of ``max_len`` tokens fits; by a
    measurement the plan is then one sequence (an update already ran; the out-of-memory retry guards it).
    """
    estimate, fixed = per_token_bytes(shape, chunk_tokens)
    per_token_used = per_token or estimate
    tokens = (budget - fixed) // per_token_used
    if tokens < max_len:
        if per_token is None:
            raise ValueError(
                f"update_memory gives {budget:,} bytes for the update, too small for one sequence of {max_len:,} "
                f"tokens: that needs {fixed + max_len * per_token_used:,} bytes ({fixed:,} for a logit chunk + "
                f"{per_token_used:,} a token). Raise update_memory, lower logit_chunk_tokens or max_new_tokens, "
                "enable gradient_checkpointing, or set token_budget to an integer."
            )
        tokens = max_len
    capped = cap is not None and tokens > cap
    if capped:
        tokens = cap  # a longer sequence gets a micro-batch of its own, as under an integer budget
    return TokenBudgetPlan(
        int(tokens), int(per_token_used), int(fixed), int(budget), int(max_len), cap if capped else None,
        per_token is not None and per_token != estimate,
    )  # fmt: skip


class UpdateSizer:
    """``token_budget`` for each update: the configured integer, or under 'auto' the plan for ``update_memory``.

    The byte budget is fixed at the first update (a share of the memory free then, after the rollout);
    the plan is made per update from its longest sequence (on a CPU capped at :data:`CPU_TOKEN_BUDGET`)
    and printed whenever it changes. On CUDA, :meth:`observe` checks the plan against the first update
    that measures the per-token cost alone (see the module docstring).
    """

    def __init__(self, token_budget: int | str, update_memory: int | float | str, chunk_tokens: int) -> None:
        check_token_budget(token_budget)
        self.token_budget, self.update_memory, self.chunk_tokens = token_budget, update_memory, chunk_tokens
        if token_budget == "auto":
            parse_update_memory(update_memory)
        self.budget: int | None = None
        self.plan: TokenBudgetPlan | None = None
        self.measured_per_token: int | None = None
        self.updates_observed = 0  # this process's updates handed to observe (the first allocates optimizer state)

    def tokens(self, model: torch.nn.Module, max_len: int) -> int:
        """The token budget for an update whose longest sequence has ``max_len`` tokens."""
        if self.token_budget != "auto":
            return int(self.token_budget)
        device = next(model.parameters()).device
        if self.budget is None:
            self.budget = self._budget_bytes(device)
        cap = CPU_TOKEN_BUDGET if device.type == "cpu" else None
        plan = plan_token_budget(
            self.budget, update_shape(model), max_len, self.chunk_tokens, self.measured_per_token, cap
        )
        if self.plan is None or plan.token_budget != self.plan.token_budget:
            print(f"[infgrpo] {plan.describe()}")
        self.plan = plan
        return plan.token_budget

    def observe(self, peak_rise_bytes: int, tokens: int, oom_retries: int = 0) -> None:
        """Checks the plan against an update whose largest micro-batch had ``tokens`` padded tokens and whose
        peak rose ``peak_rise_bytes`` above the memory at its start; a higher measurement lowers later budgets.

        Only the first update that measures the per-token cost alone counts: not this process's first update
        (AdamW creates its state in that update's optimizer step, the backward the gradients) and not one
        with ``oom_retries`` (its peak is the failed attempt's)."""
        self.updates_observed += 1
        if self.plan is None or self.measured_per_token is not None or tokens < 1:
            return
        if self.updates_observed == 1:
            return
        if oom_retries:
            print(
                f"[infgrpo] update memory: {peak_rise_bytes / 1e9:.2f} GB peak not used to check the plan (it includes "
                "the attempt that ran out of memory); the next update is measured"
            )
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
