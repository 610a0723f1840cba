"""PolicyUpdate: one rollout's policy update, as a Lightning-free object a test can drive by hand.

    updater = PolicyUpdate(UpdateConfig(token_budget=4096), Objective(), max_completion_length=256, pad_id=0)
    result = updater.run(policy, rollouts, advantages, backward, optimizer_step, zero_grad)
    result.metrics()   # {"loss": .., "kl": .., "clip_ratio": .., "update/token_budget": 4096, ...}

Steps of :meth:`PolicyUpdate.run`:

1. the token budget of this update (an integer, or under ``token_budget: auto`` the plan for
   ``update_memory``; capped at what fit after an earlier out-of-memory retry) and the micro-batches
   within it (with ``share_prompt``, each group's prompt once, however many micro-batches its
   completions span: :mod:`infgrpo.update.shared_prompt.forward`, :mod:`infgrpo.update.shared_prompt.carry`),
   completions cut at ``max_new_tokens`` masked out when asked;
2. frozen passes where needed: the reference's log-probs (``beta > 0``), the rollout policy's
   (``num_iterations > 1``) and the entropies that set the entropy mask's threshold
   (``top_entropy_quantile < 1``, over the whole batch);
3. ``num_iterations`` optimizer steps, each accumulating the policy gradient over the micro-batches
   (:func:`~infgrpo.update.step.accumulate_policy_gradients`).

Out of device memory (one process): step 2 is retried on micro-batches packed at half the budget, step
3 on every micro-batch split in two (the gradient does not depend on the packing); later updates keep
the budget that fit. With several ranks, or when a micro-batch is one sequence already, the error says
which setting to lower. The caller (the LightningModule) passes what Lightning owns: ``backward``,
``optimizer_step`` (clipping, optimizer and scheduler step) and ``zero_grad``.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from infgrpo.algo import AdaptiveEntropyCoef, Objective, entropy_threshold, high_entropy_mask
from infgrpo.algo.zero_advantage import resolve_skip, trained_rows
from infgrpo.runtime.oom import first_line, retry_on_oom
from infgrpo.runtime.ranks import Ranks
from infgrpo.runtime.threads import adapt_threads
from infgrpo.sampler import Rollouts, SamplerConfig
from infgrpo.settings import InfgrpoWarning
from infgrpo.update.budget import UpdateSizer
from infgrpo.update.config import UpdateConfig
from infgrpo.update.shared_prompt.batching import SharedMicroBatch, prepare_shared_microbatches
from infgrpo.update.shared_prompt.check import resolve_share_prompt
from infgrpo.update.step import (
    Batch,
    GradientStep,
    LossConfig,
    accumulate_policy_gradients,
    frozen_logprobs,
    per_row,
    prepare_microbatches,
    split_microbatches,
)
from infgrpo.vision.features import forget_features


@dataclass
class UpdateResult:
    """What one update did: the last optimizer step's loss statistics, the budget used, the retries."""

    stats: dict[str, float]
    """Loss, KL and clip statistics of the last optimizer step (see ``accumulate_policy_gradients``)."""
    token_budget: int
    """Padded tokens per micro-batch the update ran with."""
    oom_retries: int
    """Out-of-memory retries (re-packs and splits) of this update."""
    largest_microbatch: int
    """Padded tokens of the largest micro-batch it ran."""
    rows_trained: int = 0
    """Rows (completions) the forward and backward ran."""
    rows_skipped: int = 0
    """Rows of advantage exactly 0 left out (``update.skip_zero_advantage``): their gradient is 0."""

    def metrics(self) -> dict[str, float]:
        """``stats`` plus ``update/oom_retries``, ``update/token_budget`` and the rows trained and skipped."""
        rows = {"update/rows_trained": self.rows_trained, "update/rows_skipped": self.rows_skipped}
        return {"update/oom_retries": self.oom_retries, "update/token_budget": self.token_budget, **rows, **self.stats}


@dataclass(frozen=True)
class UpdateCall:
    """One call of :meth:`PolicyUpdate.run`: what its steps read (its arguments, see there)."""

    policy: PreTrainedModel
    rollouts: Rollouts
    advantages: torch.Tensor
    backward: Callable[[torch.Tensor], None]
    zero_grad: Callable[[], None]
    ref_model: PreTrainedModel | None
    ranks: Ranks
    no_sync: Callable[[], contextlib.AbstractContextManager]
    rows: list[int] | None
    """The rows it trains (``update.skip_zero_advantage``: those of advantage not 0), or None: every row."""
    counts: tuple[int, int] | None
    """(sequences, active tokens) of the whole rollout when ``rows`` skips some (the normalizers count every row)."""

    @property
    def device(self) -> torch.device:
        """The policy's device, where the micro-batches go."""
        return next(self.policy.parameters()).device


def largest(mbs: list[Batch]) -> int:
    """Padded tokens of the largest of ``mbs``."""
    return max(mb.padded_tokens for mb in mbs)


class PolicyUpdate:
    """The policy update of every training step; keeps what later updates learn from earlier ones.

    Args:
        update: how the update runs (``model.update``): iterations, token budget and its memory, the LM head's
            chunks, and the zero-advantage skip (resolved here for ``objective``:
            :func:`~infgrpo.algo.zero_advantage.resolve_skip`).
        objective: what it minimizes (``model.objective``), ``mask_truncated_completions`` included.
        temperature: the sampling temperature the log-probs are taken at (the sampler's; 1.0 for greedy).
        max_completion_length: the sampler's ``max_new_tokens`` (the ``dr_grpo`` normalizer).
        pad_id: the token that pads micro-batches.
        share_prompt: run each group's prompt once per micro-batch, its completions attending to its K/V:
            ``update.share_prompt`` resolved for the loaded model by the caller, which holds the model
            (:func:`~infgrpo.update.shared_prompt.check.resolve_share_prompt`).
    """

    def __init__(
        self,
        update: UpdateConfig = UpdateConfig(),  # noqa: B008 - read, never mutated
        objective: Objective = Objective(),  # noqa: B008 - frozen
        *,
        temperature: float = 1.0,
        max_completion_length: int = 128,
        pad_id: int = 0,
        share_prompt: bool = False,
    ) -> None:
        self.loss = LossConfig(objective, temperature, max_completion_length, update.logit_chunk_tokens)
        self.num_iterations, self.pad_id, self.share_prompt = update.num_iterations, pad_id, share_prompt
        self.skip_zero_advantage = resolve_skip(update.skip_zero_advantage, objective)
        self.mask_truncated_completions = objective.mask_truncated_completions
        self.sizer = UpdateSizer(update.token_budget, update.update_memory, update.logit_chunk_tokens)
        self.token_budget_cap: int | None = None  # after an out-of-memory retry: the budget that fit
        self.entropy_coef = AdaptiveEntropyCoef.from_objective(objective)  # None unless adaptive

    @classmethod
    def for_run(
        cls, policy: PreTrainedModel, update: UpdateConfig, objective: Objective, sampler: SamplerConfig, pad_id: int
    ) -> PolicyUpdate:
        """The update of a run on the loaded ``policy``: log-probs at the sampler's temperature (1.0 for greedy),
        ``max_new_tokens`` as ``dr_grpo``'s normalizer, ``update.share_prompt`` resolved on the model."""
        temperature = sampler.temperature if sampler.temperature > 0 else 1.0
        shared = resolve_share_prompt(policy, update.share_prompt)  # probed on the loaded model
        return cls(
            update, objective, temperature=temperature, max_completion_length=sampler.max_new_tokens, pad_id=pad_id,
            share_prompt=shared,
        )  # fmt: skip

    def run(
        self,
        policy: PreTrainedModel,
        rollouts: Rollouts,
        advantages: torch.Tensor,
        backward: Callable[[torch.Tensor], None],
        optimizer_step: Callable[[], None],
        zero_grad: Callable[[], None],
        ref_model: PreTrainedModel | None = None,
        ranks: Ranks = Ranks(),  # noqa: B008 - frozen dataclass, never mutated
        no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ) -> UpdateResult:
        """The update on ``rollouts`` with ``advantages`` (N,); see the module docstring.

        ``ref_model``: the frozen KL reference of full fine-tuning (None: the policy with adapters
        disabled); ``ranks`` / ``no_sync``: data parallelism (see :mod:`infgrpo.update.step`).
        """
        rows = trained_rows(advantages, rollouts.lengths) if self.skip_zero_advantage else None
        counts = self.batch_counts(rollouts) if rows is not None else None  # the normalizers count every row
        call = UpdateCall(policy, rollouts, advantages, backward, zero_grad, ref_model, ranks, no_sync, rows, counts)
        # 1) the token budget and the micro-batches within it
        budget = self._budget(policy, rollouts)
        adapt_threads(policy, rows=budget)  # CPU threads for the update: work size, free cores
        # 2) frozen log-probs; out of memory: packed again at half the budget
        frozen, repack = functools.partial(self._frozen, call), functools.partial(self._repack, call)
        _, (budget, mbs), retries = retry_on_oom(frozen, (budget, self._pack(call, budget)), repack)
        for mb, behaviour in zip(mbs, per_row(mbs, rollouts.logprobs), strict=True):
            mb.frozen.behaviour = behaviour  # the rollout's log-probs, (n_mb, C_mb)
        # 3) num_iterations optimizer steps; out of memory: every micro-batch split in two (nothing was stepped yet)
        accumulate, split = functools.partial(self._accumulate, call, budget), functools.partial(self._split, call)
        policy.train()
        for _ in range(self.num_iterations):
            step, mbs, more = retry_on_oom(accumulate, mbs, split)
            retries += more
            optimizer_step()
            applied = self._move_entropy_coef(step.entropy_bonus)
        coef = self.entropy_coef.coef if self.entropy_coef is not None else self.loss.objective.entropy_coef
        stats = {**step.stats, "entropy_coef": coef, "entropy_coef_applied": applied}
        if retries:  # later updates pack within what fit
            self.token_budget_cap = budget = largest(mbs)
        trained = len(rollouts) if rows is None else len(rows)
        forget_features(rollouts.vision)  # the image features the step's forwards shared: no later forward reads them
        return UpdateResult(stats, budget, retries, largest(mbs), trained, len(rollouts) - trained)

    def _budget(self, policy: PreTrainedModel, rollouts: Rollouts) -> int:
        """This update's token budget: the integer, or the plan for ``update_memory``, capped at what fit after
        an earlier out-of-memory retry."""
        longest = max(len(p) for p in rollouts.prompt_table()[0]) + max(rollouts.lengths, default=0)
        planned = self.sizer.tokens(policy, longest)
        return min(planned, self.token_budget_cap or planned)

    def _pack(self, call: UpdateCall, budget: int, every_row: bool = False) -> list[Batch]:
        """The micro-batches of the rows ``call`` trains (of every row with ``every_row``), on the policy's device."""
        rows = None if every_row else call.rows
        return [mb.to(call.device) for mb in self.pack(call.rollouts, budget, rows)]

    def _frozen(self, call: UpdateCall, packed: tuple[int, list[Batch]]) -> None:
        """Step 2 on the micro-batches of ``packed`` (budget, micro-batches): each gets the reference's
        log-probs (``beta > 0``) and the rollout policy's (``num_iterations > 1``), without gradients."""
        mbs, cfg, chunk = packed[1], self.loss, self.loss.logit_chunk_tokens
        if cfg.objective.beta > 0:
            refs = frozen_logprobs(
                call.policy, mbs, cfg.temperature, ref_model=call.ref_model, reference=True, chunk_tokens=chunk
            )
            for mb, ref in zip(mbs, refs, strict=True):
                mb.frozen.ref = ref
        if self.num_iterations > 1:
            olds = frozen_logprobs(call.policy, mbs, cfg.temperature, chunk_tokens=chunk)
            for mb, old in zip(mbs, olds, strict=True):
                mb.frozen.old = old

    def _repack(self, call: UpdateCall, packed: tuple[int, list[Batch]], message: str) -> tuple[int, list[Batch]]:
        """Step 2 ran out of memory (``message``) on ``packed``: the rows packed again at half the budget."""
        half = self.halve(message, packed[1], call.ranks)
        return half, self._pack(call, half)

    def _accumulate(self, call: UpdateCall, budget: int, mbs: list[Batch]) -> GradientStep:
        """One optimizer step's gradient over ``mbs`` (this step's entropy masks first, when asked)."""
        call.zero_grad()
        if self.loss.objective.entropy_mask:
            every = self._pack(call, budget, every_row=True) if call.rows is not None else None
            for mb, mask in zip(mbs, self.entropy_masks(call.policy, mbs, call.ranks, every), strict=True):
                mb.frozen.entropy_mask = mask
        coef = self.entropy_coef.applied() if self.entropy_coef is not None else None
        return accumulate_policy_gradients(
            call.policy, mbs, call.advantages, self.loss, call.backward, ranks=call.ranks, no_sync=call.no_sync,
            entropy_coef=coef, batch_counts=call.counts,
        )  # fmt: skip

    def _split(self, call: UpdateCall, mbs: list[Batch], message: str) -> list[Batch]:
        """Step 3 ran out of memory (``message``) on ``mbs``: the partial gradients dropped, every micro-batch
        split in two."""
        call.zero_grad()
        self.halve(message, mbs, call.ranks)
        return split_microbatches(mbs)

    def _move_entropy_coef(self, bonus: tuple[float, float] | None) -> float:
        """After an optimizer step: the entropy coefficient its loss used; the adaptive one then moves by the
        step's entropy ``bonus`` (sum, tokens)."""
        if self.entropy_coef is None:
            return self.loss.objective.entropy_coef
        applied = self.entropy_coef.applied()  # what this step's loss used, before the schedule moves
        self.entropy_coef.update(*bonus)
        return applied

    def batch_counts(self, rollouts: Rollouts) -> tuple[int, int]:
        """(sequences, active completion tokens) of the whole rollout, as its micro-batches' masks would count."""
        masked = self.mask_truncated_completions
        lengths, truncated = rollouts.model_lengths, rollouts.truncated  # model tokens: tool results are not trained
        tokens = sum(n for n, cut in zip(lengths, truncated, strict=True) if not (masked and cut))
        return len(rollouts), tokens

    def entropy_masks(
        self, policy: PreTrainedModel, mbs: list[Batch], ranks: Ranks, every: list[Batch] | None = None
    ) -> list[torch.Tensor]:
        """``top_entropy_quantile``: each micro-batch's (n, C) mask of the tokens at or above the quantile of
        the *whole* batch's entropies (every rank's), from a pass without gradients under the current policy.

        ``every``: the micro-batches of every row when ``mbs`` hold only the trained ones (the skip): the
        threshold is taken over all of them, the masks cut out for ``mbs``.
        """
        cfg = self.loss
        source = every if every is not None else mbs
        _, entropies = frozen_logprobs(
            policy, source, cfg.temperature, chunk_tokens=cfg.logit_chunk_tokens, entropy=True
        )
        threshold = entropy_threshold(
            entropies, [mb.completion_mask for mb in source], cfg.objective.top_entropy_quantile, ranks
        )
        if every is not None:  # each row's entropies, (C_row,) in their own dtype, into the trained packing
            by_row = {row: e[r] for mb, e in zip(every, entropies, strict=True) for r, row in enumerate(mb.rows)}
            cut = []
            for mb in mbs:
                width, first = mb.completion_ids.shape[1], by_row[mb.rows[0]]
                t = torch.zeros(len(mb.rows), width, dtype=first.dtype, device=first.device)
                for r, row in enumerate(mb.rows):
                    n = min(width, by_row[row].shape[0])
                    t[r, :n] = by_row[row][:n]
                cut.append(t)
            entropies = cut
        return [high_entropy_mask(e, mb.completion_mask, threshold) for e, mb in zip(entropies, mbs, strict=True)]

    def state_dict(self) -> dict[str, float]:
        """What later updates learned: the adaptive entropy coefficient (TRL's keys), the budget that fit and
        the memory plan of ``token_budget: auto``."""
        state: dict = {"token_budget_cap": self.token_budget_cap, **self.sizer.state_dict()}
        if self.entropy_coef is not None:
            state.update(self.entropy_coef.state_dict())
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`."""
        self.token_budget_cap = state.get("token_budget_cap")
        self.sizer.load_state_dict(state)
        if self.entropy_coef is not None and "entropy_coef" in state:
            self.entropy_coef.load_state_dict(state)

    def observe(self, peak_rise_bytes: int | None, result: UpdateResult) -> None:
        """CUDA: checks the plan of ``token_budget: auto`` against the update's measured peak rise (not on this
        process's first update nor on one that ran out of memory: :meth:`UpdateSizer.observe`)."""
        if peak_rise_bytes is not None:
            self.sizer.observe(peak_rise_bytes, result.largest_microbatch, result.oom_retries)

    def pack(self, rollouts: Rollouts, budget: int, rows: list[int] | None = None) -> list[Batch]:
        """The rollout's micro-batches within ``budget`` padded tokens (on the CPU), of ``rows`` only when given
        (each micro-batch's ``rows`` are then still indices of the whole rollout).

        With ``mask_truncated_completions``, completions cut at ``max_new_tokens`` (:attr:`Rollouts.truncated`) get
        an all-zero loss mask: they keep their place in the group's advantages but add nothing to the loss. A
        multi-turn rollout's tool-result tokens (``Rollouts.tool_masks`` 0) stay in the input ids and the attention
        (the model reads them) and leave the loss mask, so the loss, KL, entropy, token counts and the behaviour
        terms see model tokens only (TRL's ``completion_mask * tool_mask``); they travel with their rows through
        any split. Image prompts (``Rollouts.vision``) give each micro-batch its prompts' vision inputs: a shared prompt
        forward encodes them once, unshared rows get their prompt's features from one encoder pass.
        """
        rows = list(range(len(rollouts))) if rows is None else rows
        completions = [rollouts.completion_ids[i] for i in rows]
        table, index = rollouts.prompt_table()  # each entry's own prompt (a row of several: several shared prompts)
        if self.share_prompt:
            mbs = prepare_shared_microbatches(table, [index[i] for i in rows], completions, budget, self.pad_id)
        else:
            prompts = [table[index[i]] for i in rows]
            mbs = prepare_microbatches(prompts, completions, budget, self.pad_id)
        if len(rows) != len(rollouts):
            for mb in mbs:
                mb.rows = [rows[r] for r in mb.rows]
        if rollouts.vision is not None:  # image prompts: each forward encodes a prompt's images once
            for mb in mbs:
                shared = isinstance(mb, SharedMicroBatch)
                mb.visions = [rollouts.vision[p if shared else index[p]] for p in (mb.prompts if shared else mb.rows)]
        if rollouts.tool_masks is not None:
            for mb in mbs:
                for r, row in enumerate(mb.rows):
                    tool_mask = rollouts.tool_masks[row]
                    mb.completion_mask[r, : len(tool_mask)] *= torch.tensor(tool_mask, dtype=mb.completion_mask.dtype)
        if self.mask_truncated_completions:
            truncated = rollouts.truncated
            for mb in mbs:
                for r, row in enumerate(mb.rows):
                    if truncated[row]:
                        mb.completion_mask[r] = 0.0
        return mbs

    @staticmethod
    def halve(message: str, mbs: list[Batch], ranks: Ranks) -> int:
        """Half the size of the largest of ``mbs``, after an update ran out of device memory with them.

        The size of a micro-batch is its padded tokens. Raises a ``torch.OutOfMemoryError``
        that says what to lower when halving cannot help (every micro-batch is one sequence already) or
        when ranks would disagree (data parallel).
        """
        first, size = first_line(message), largest(mbs)
        if ranks.world_size > 1:
            raise torch.OutOfMemoryError(
                f"the update ran out of device memory on rank {ranks.rank} with micro-batches of up to "
                f"{size} tokens ({first}). With several ranks the budget is not lowered automatically (ranks "
                f"must agree): set model.update.token_budget to {size // 2} or less."
            )
        if all(len(mb.rows) == 1 for mb in mbs):
            raise torch.OutOfMemoryError(
                f"the update ran out of device memory with one sequence per micro-batch ({first}): a single "
                f"prompt + completion of up to {size} tokens does not fit. Enable model.policy.gradient_checkpointing, "
                "use LoRA (model.lora.r) or 4-bit weights (model.quantization.load_in_4bit), or lower "
                "model.sampler.max_new_tokens."
            )
        warnings.warn(
            f"[infgrpo] the update ran out of device memory with micro-batches of up to {size} tokens ({first}); "
            f"retrying with half. Set model.update.token_budget to {size // 2} or less to skip this.",
            InfgrpoWarning,
            stacklevel=4,
        )
        return max(1, size // 2)
