"""GRPOModule: the LightningModule that wires sampler, rewards and the GRPO objective together.

Each training batch is a list of prompts. Before the optimization step (``on_train_batch_start``)
the :class:`~infgrpo.MicroGroupSampler` draws ``group_size`` completions per prompt without
gradients; ``training_step`` scores them, computes group advantages and runs ``num_iterations``
optimizer steps, each accumulating gradients over micro-batches bounded by ``token_budget`` tokens.

Data parallel (``Trainer(strategy="ddp", devices=N, num_nodes=M)``): each rank samples the groups of
its contiguous share of the global batch, with random streams keyed by the *global* prompt index,
so a run on N ranks draws the completions one process with the whole batch would. Groups never span
ranks; batch-wide quantities (``scale_rewards: batch``, the loss normalizers, metrics) are gathered
over ranks (:class:`~infgrpo.runtime.ranks.Ranks`), and the parameters stay identical on every rank.

    from infgrpo import GRPOModule, SamplerConfig
    from infgrpo.data import PromptDataModule
    import lightning as L

    module = GRPOModule(model="tiny", group_size=8, sampler=SamplerConfig(num_slots=8))
    L.Trainer(max_steps=20).fit(module, PromptDataModule(path="tiny", batch_size=4))
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
import warnings
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.nn.parallel import DistributedDataParallel
from torchmetrics import MeanMetric

from infgrpo.algo import ADVANTAGES, KL_ESTIMATORS, LOSS_TYPES, zero_std_fraction
from infgrpo.algo.advantages import check_scale_rewards, nanstd
from infgrpo.callbacks.completion_table import log_completions, prompt_for_table
from infgrpo.models import (
    check_dtype,
    check_loading,
    frozen_reference,
    load_policy,
    load_tokenizer,
    resolve_output_dir,
    save_trained,
)
from infgrpo.rewards import check_rewards, compute_rewards
from infgrpo.rewards.core import check_on_error
from infgrpo.runtime.hardware import cpu_flags, slow_cpu_dtype
from infgrpo.runtime.memory import PhaseMemory
from infgrpo.runtime.ranks import Ranks
from infgrpo.runtime.seeds import derive_seed
from infgrpo.runtime.threads import adapt_threads, check_threads, set_threads
from infgrpo.sampler import MicroGroupSampler, Rollouts, SamplerConfig
from infgrpo.update import (
    LossConfig,
    accumulate_policy_gradients,
    frozen_logprobs,
    prepare_microbatches,
    split_microbatches,
)
from infgrpo.update.budget import UpdateSizer, check_token_budget, parse_update_memory
from infgrpo.update.chunked_head import DEFAULT_LOGIT_CHUNK_TOKENS
from infgrpo.update.logprobs import check_chunked_head

SCHEDULE_METRICS = (
    "bubble_fraction",
    "steps_over_lower_bound",
    "replans",
    "length_mae",
    "length_spearman",
    "length_within_20pct",
    "predict_time_s",
    "num_slots",
    "oom_retries",
)
"""Keys of ``Rollouts.stats`` logged as ``train/rollout/<key>`` (when the sampler reports them)."""


def accuracy(values: torch.Tensor) -> torch.Tensor:
    """Share of ``values`` (N,) >= 1 (a correct answer), failed (NaN) values left out; NaN when all failed."""
    scored = values[~values.isnan()]
    return (scored >= 1.0).float().mean() if scored.numel() else torch.tensor(float("nan"))


class GRPOModule(L.LightningModule):
    """GRPO with micro-group rollouts and memory that does not grow with the group size.

    Args:
        model: Hugging Face model id or local folder; ``"tiny"`` is the shipped tiny Qwen3.
        dtype: weights dtype: float32, bfloat16, float16 or float64.
        lora_r: LoRA rank (0 = full fine-tuning). With LoRA the KL reference is the same model with
            adapters disabled; without it, a frozen copy (only loaded when ``beta != 0``).
        lora_alpha: LoRA scaling numerator.
        lora_dropout: dropout on the LoRA path.
        lora_target_modules: modules that get adapters; ``"all-linear"`` for every linear layer.
        load_in_4bit: quantize the frozen base weights to 4 bits with bitsandbytes (needs LoRA).
        bnb_4bit_quant_type: ``nf4`` (normal-float, QLoRA's) or ``fp4``.
        bnb_4bit_use_double_quant: also quantize the quantization constants (~0.4 bit/param saved).
        bnb_4bit_compute_dtype: dtype the 4-bit layers compute in (bfloat16 on recent GPUs).
        gradient_checkpointing: recompute activations in the backward pass (less memory, ~30% slower).
        group_size: completions sampled per prompt (G >= 2). Rollout memory does not depend on it.
        sampler: rollout sampling: the KV slot pool, decoding, and length-aware scheduling.
        rewards: reward functions and their weights, e.g. ``{"synthetic": 1.0}``; names of the
            registry or ``"module.path:function"``.
        accuracy_reward: reward whose value >= 1 counts as a correct answer (logged as accuracy);
            None disables the accuracy metric.
        reward_on_error: what a failed reward (the function raised, or returned None/NaN/inf) does:
            ``raise`` (stop, naming the function and sample); ``zero`` (score it 0; the 0 enters its group's
            mean and std, so the failed row is pushed down); ``skip`` (TRL 1.16: left out of the weighted
            sum; a completion whose every reward failed is left out of its group's mean and std and gets
            advantage 0). Failed completions are counted in ``train/rewards_failed``.
        advantage: advantage estimator name (``grpo``).
        scale_rewards: ``group`` / ``batch`` / ``none``: which std divides the centered rewards.
        loss_type: ``grpo`` (per-sequence mean), ``bnpo``, ``dapo`` or ``dr_grpo``.
        epsilon_low: lower clip range: the ratio is clipped below at 1 - epsilon_low.
        epsilon_high: upper clip range: the ratio is clipped above at 1 + epsilon_high (DAPO uses 0.28).
        beta: KL coefficient against the reference policy (0 = no reference is loaded).
        kl_estimator: ``k3`` (default, TRL's), ``k1`` or ``k2``.
        kl_bias_correction: multiply the KL estimate by the importance ratio (TRL's ``use_bias_correction_kl``).
            On by default, as in TRL 1.16: with it the KL term's gradient is the unbiased gradient of the
            reverse KL to the reference (DeepSeek-V3.2), also on-policy, where the ratio is 1 but its gradient
            is not; a TRL recipe with ``beta > 0`` then trains the same here. Off gives the original GRPO
            (DeepSeekMath) k3 gradient and TRL < 1.16's behaviour. No effect with ``beta: 0``.
        mask_truncated_completions: leave completions cut at ``max_new_tokens`` out of the loss (DAPO's
            overlong filtering; TRL's option of the same name). They still count in the group's advantages.
        num_iterations: optimizer steps per rollout (mu); > 1 reuses the rollout with old log-probs.
        token_budget: padded tokens per update micro-batch; bounds training memory for any B*G. ``auto``: as
            many as ``update_memory`` holds, from a per-token cost of the model's activations plus one logit
            chunk (:mod:`infgrpo.update.budget`), planned per update from its longest sequence and printed;
            on CUDA checked against the first update's measured peak. An update that runs out of device
            memory is retried on micro-batches of half the size (one process).
        update_memory: the update's memory budget under ``token_budget: auto``: bytes (an integer, or a
            string such as ``"8GB"``) or a float in (0, 1]: that share of the memory free when the first
            update starts (after the rollout; weights, gradients and optimizer state are outside it).
        logit_chunk_tokens: completion positions that go through the LM head at a time when computing
            log-probs (forward and backward recompute each chunk), so the update never holds logits for a
            whole micro-batch: extra memory ~ chunk x vocabulary x 8-12 bytes (0.6-0.9 GB at 512 positions
            and Qwen3's 151,936 tokens), at about the speed of full logits. Smaller saves memory, larger
            uses bigger matmuls. 0 = full logits from the model's own forward (O(micro-batch x vocabulary)
            memory; needed for models that change their logits after the head, e.g. soft-capping).
        learning_rate: AdamW learning rate.
        weight_decay: AdamW weight decay.
        warmup_steps: linear learning-rate warmup in optimizer steps: optimizer step k (from 0) uses
            (k + 1) / (warmup_steps + 1) of the rate until the full rate at step ``warmup_steps``.
        max_grad_norm: gradient clipping norm (0 disables).
        eval_temperature: temperature of held-out evaluation (0 = greedy).
        log_completions_every_n_steps: every N steps, log a table of prompts, completions and
            rewards to the loggers and the console (0 = never).
        num_completions_to_log: rows of that table.
        output_dir: at the end of fit, write the trained LoRA adapter (a peft adapter folder) or,
            without LoRA, the whole model here. A relative path is under the run's root
            (``trainer.default_root_dir``; the working directory when unset), e.g. ``adapter``.
        seed: base seed of the rollout random streams.
        threads: torch CPU threads: 'auto' (default) picks, before each rollout and update, as many as
            the work can use and the cores other processes leave free (torch's default, one per core,
            collapses when another process keeps a core busy: 28x slower on 2 cores); an integer fixes
            the count (bit-identical CPU runs across machines). See infgrpo.runtime.threads.
    """

    def __init__(
        self,
        model: str = "tiny",
        dtype: str = "float32",
        lora_r: int = 0,
        lora_alpha: int = 16,
        lora_dropout: float = 0.0,
        lora_target_modules: str | list[str] = "all-linear",
        load_in_4bit: bool = False,
        bnb_4bit_quant_type: str = "nf4",
        bnb_4bit_use_double_quant: bool = True,
        bnb_4bit_compute_dtype: str = "bfloat16",
        gradient_checkpointing: bool = False,
        group_size: int = 8,
        sampler: SamplerConfig = SamplerConfig(),  # noqa: B008 - copied below; a dataclass gives nested CLI flags
        rewards: dict[str, float] | None = None,
        accuracy_reward: str | None = "synthetic",
        reward_on_error: str = "raise",
        advantage: str = "grpo",
        scale_rewards: str = "group",
        loss_type: str = "grpo",
        epsilon_low: float = 0.2,
        epsilon_high: float = 0.2,
        beta: float = 0.0,
        kl_estimator: str = "k3",
        kl_bias_correction: bool = True,
        mask_truncated_completions: bool = False,
        num_iterations: int = 1,
        token_budget: int | str = 4096,
        update_memory: int | float | str = 0.7,
        logit_chunk_tokens: int = DEFAULT_LOGIT_CHUNK_TOKENS,
        learning_rate: float = 1e-4,
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        max_grad_norm: float = 1.0,
        eval_temperature: float = 0.0,
        log_completions_every_n_steps: int = 0,
        num_completions_to_log: int = 4,
        output_dir: str | None = None,
        seed: int = 0,
        threads: int | Literal["auto"] = "auto",
    ) -> None:
        super().__init__()
        sampler = SamplerConfig(**sampler) if isinstance(sampler, dict) else dataclasses.replace(sampler)
        rewards = dict(rewards) if rewards is not None else {"synthetic": 1.0}
        # 1) validate everything a user can set, before loading anything
        if not isinstance(group_size, int) or group_size < 2:
            raise ValueError(f"group_size={group_size!r} must be an integer >= 2 (GRPO compares samples of a group)")
        if num_iterations < 1:
            raise ValueError(f"num_iterations={num_iterations} must be >= 1")
        check_token_budget(token_budget)
        if token_budget == "auto":
            parse_update_memory(update_memory)
        if isinstance(logit_chunk_tokens, bool) or not isinstance(logit_chunk_tokens, int) or logit_chunk_tokens < 0:
            raise ValueError(
                f"logit_chunk_tokens={logit_chunk_tokens!r} must be an integer >= 1 (positions through the LM head "
                "at a time) or 0 (full logits)"
            )
        if epsilon_low < 0 or epsilon_high < 0:
            raise ValueError(f"epsilon_low={epsilon_low}, epsilon_high={epsilon_high} must be >= 0")
        if beta < 0:
            raise ValueError(f"beta={beta} must be >= 0")
        check_on_error(reward_on_error)
        if accuracy_reward is not None and accuracy_reward not in rewards:
            raise ValueError(f"accuracy_reward={accuracy_reward!r} must be one of rewards: {', '.join(rewards)}")
        ADVANTAGES.check(advantage)
        LOSS_TYPES.check(loss_type)
        KL_ESTIMATORS.check(kl_estimator)
        check_scale_rewards(scale_rewards)
        check_dtype(dtype)
        check_loading(lora_r, load_in_4bit, bnb_4bit_quant_type, bnb_4bit_compute_dtype)
        check_rewards(rewards)
        threads = check_threads(threads, "threads")
        # plain types only, so checkpoints load with torch.load(weights_only=True)
        self.save_hyperparameters(ignore=["sampler"])
        self.hparams["sampler"] = dataclasses.asdict(sampler)
        self.automatic_optimization = False
        set_threads(threads)  # process-wide: torch has one intra-op pool
        # 2) load the policy, its tokenizer and (if needed) a frozen reference
        self.tokenizer = load_tokenizer(model)
        self.policy = load_policy(
            model,
            dtype,
            lora_r,
            lora_alpha,
            lora_dropout,
            lora_target_modules,
            load_in_4bit,
            bnb_4bit_quant_type,
            bnb_4bit_use_double_quant,
            bnb_4bit_compute_dtype,
            gradient_checkpointing,
        ).train()
        check_chunked_head(self.policy, logit_chunk_tokens)  # refuses models whose logits it cannot reproduce
        self._ref: list = [frozen_reference(self.policy)] if beta > 0 and lora_r == 0 else []
        self.sampler = MicroGroupSampler(self.policy, self.tokenizer, sampler)
        self.eval_sampler = MicroGroupSampler(
            self.policy,
            self.tokenizer,
            SamplerConfig(
                max_new_tokens=sampler.max_new_tokens,
                temperature=eval_temperature,
                stop_token_ids=sampler.stop_token_ids,
                cuda_graphs=sampler.cuda_graphs,
                decode_attention=sampler.decode_attention,
                keep_pool=False,  # evaluation is rare: its pool would only hold memory between runs
            ),
        )
        self.loss_cfg = LossConfig(
            loss_type,
            epsilon_low,
            epsilon_high,
            beta,
            kl_estimator,
            sampler.temperature if sampler.temperature > 0 else 1.0,
            sampler.max_new_tokens,
            kl_bias_correction,
            logit_chunk_tokens,
        )
        self.rewards = rewards
        self.val_reward = MeanMetric()
        self.val_accuracy = MeanMetric()
        self._rollout: Rollouts | None = None
        self.ranks = Ranks()  # the data-parallel ranks, known once fit starts
        # after an update ran out of device memory: the token budget that fit (see _after_update_oom)
        self.token_budget_cap: int | None = None
        self.update_sizer = UpdateSizer(token_budget, update_memory, logit_chunk_tokens)
        self.phase_memory = PhaseMemory()  # peaks (CUDA) and windows of the rollout and the update

    @property
    def ref_model(self) -> torch.nn.Module | None:
        """The frozen KL reference of full fine-tuning (``beta > 0``, ``lora_r == 0``), else None.

        Held in a plain list, so it is no registered submodule: it stays out of the checkpoint, and
        :meth:`on_fit_start` moves it to the device. With LoRA the reference is the policy with its adapters
        disabled.
        """
        return self._ref[0] if self._ref else None

    # -- rollout ----------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        """Moves the frozen reference (if any) to the module's device and learns the data-parallel ranks.

        On a CPU, warns once when the weights' dtype has no native support there (see infgrpo.runtime.hardware).
        """
        if self.device.type == "cpu":
            hp = self.hparams
            slow = slow_cpu_dtype(hp.bnb_4bit_compute_dtype if hp.load_in_4bit else hp.dtype, cpu_flags())
            if slow:
                rank_zero_warn(f"[infgrpo] {slow}")
        if self.ref_model is not None:
            self.ref_model.to(self.device)
        self.setup_ranks()

    def setup_ranks(self) -> None:
        """Learns the data-parallel ranks from the trainer (each rollout hands them to the sampler).

        Each rank reseeds torch's global generator (used only by dropout) with its rank, so ranks draw
        distinct dropout masks; the rollout streams are keyed by global prompt index instead.
        """
        world = self.trainer.world_size
        if world == 1:
            self.ranks = Ranks()
        else:
            if not isinstance(self.trainer.strategy.model, DistributedDataParallel):
                raise ValueError(
                    f"trainer.strategy={type(self.trainer.strategy).__name__} is not supported with {world} "
                    "processes; use strategy 'ddp' (ranks run different numbers of micro-batches, which only "
                    "DDP's gradient accumulation (no_sync) tolerates)"
                )
            self.ranks = Ranks(world, self.global_rank, lambda x: self.all_gather(x.to(self.device)))
            torch.manual_seed(derive_seed(torch.initial_seed(), self.global_rank))

    def on_train_batch_start(self, batch: list[dict], batch_idx: int) -> None:
        """Samples the group of every prompt of the batch before the optimization step."""
        seed = derive_seed(self.hparams.seed, self.sampler.calls)  # the same on every rank
        prompts = [b["prompt_ids"] for b in batch]
        offset = self.ranks.prompt_offset(len(batch))  # streams keyed by the global prompt index
        self.phase_memory.start("rollout", self.device)
        self._rollout = self.sampler.sample(
            prompts, self.hparams.group_size, seed, prompt_offset=offset, ranks=self.ranks
        )
        self.phase_memory.end("rollout", self.device)

    def score(
        self, rollouts: Rollouts, metas: list[dict]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], list[str], torch.Tensor]:
        """Rewards (N,) of the completions (NaN: unscorable under ``reward_on_error: skip``), each reward
        function's values, the decoded texts, and (N,) bool: the completions with a failed reward."""
        texts = self.tokenizer.batch_decode(rollouts.completion_ids, skip_special_tokens=True)
        per_sample_meta = [metas[i] for i in rollouts.prompt_index]
        total, parts, failed = compute_rewards(
            self.rewards,
            texts,
            per_sample_meta,
            self.hparams.reward_on_error,
            completion_lengths=rollouts.lengths,
            max_completion_length=self.sampler.config.max_new_tokens,
            return_failed=True,
        )
        return total, parts, texts, failed

    # -- update -----------------------------------------------------------------------------
    def training_step(self, batch: list[dict], batch_idx: int) -> None:
        """Scores the rollout of ``on_train_batch_start`` and runs ``num_iterations`` optimizer steps on it.

        Rewards and group advantages (N,) for the N = len(batch) x group_size completions (the batch-wide
        std and the metrics over every rank's rows); micro-batches within ``token_budget``; frozen log-probs
        of the reference (``beta > 0``) and of the rollout policy (``num_iterations > 1``). Each iteration
        accumulates the policy gradient over the micro-batches, clips it, and steps the optimizer and the
        scheduler (manual optimization: nothing is returned). Logs ``train/*`` metrics of the global batch
        and, every ``log_completions_every_n_steps`` rollouts, a table of completions.
        """
        hp = self.hparams
        rollouts = self._rollout
        assert rollouts is not None, "on_train_batch_start did not run"
        start = time.perf_counter()
        self.phase_memory.start("update", self.device)
        # 1) rewards and group advantages; groups are local, the batch (for its std and the metrics)
        # is every rank's rows, gathered in global order
        rewards, parts, texts, failed = self.score(rollouts, [b["meta"] for b in batch])
        lengths = torch.tensor(rollouts.lengths, dtype=rewards.dtype)
        truncated = torch.tensor([r == "length" for r in rollouts.finish_reasons], dtype=rewards.dtype)
        columns = [rewards, lengths, truncated, failed.to(rewards.dtype), *parts.values()]
        table = self.ranks.gather(torch.stack(columns, dim=1))  # (N_global, 4 + parts)
        advantages = ADVANTAGES.get(hp.advantage)(rewards, hp.group_size, hp.scale_rewards, batch_rewards=table[:, 0])
        # 2) micro-batches within the token budget; frozen log-probs where needed. Out of device
        # memory (one process): again with half the budget; later steps keep the budget that fit.
        prompts = [rollouts.prompt_ids[i] for i in rollouts.prompt_index]
        temp = self.loss_cfg.temperature
        longest = max(len(p) for p in rollouts.prompt_ids) + max(rollouts.lengths, default=0)
        planned = self.update_sizer.tokens(self.policy, longest)  # the integer, or the plan for update_memory
        budget = min(planned, self.token_budget_cap or planned)
        masked = rollouts.finish_reasons if hp.mask_truncated_completions else None
        adapt_threads(self.policy, rows=budget)  # CPU threads for the update: work size, free cores
        mbs, oom_retries = self._pack(prompts, rollouts.completion_ids, budget, masked), 0
        while True:
            try:
                chunk = hp.logit_chunk_tokens
                ref = frozen_logprobs(self.policy, mbs, temp, self.ref_model, True, chunk) if hp.beta > 0 else None
                old = frozen_logprobs(self.policy, mbs, temp, chunk_tokens=chunk) if hp.num_iterations > 1 else None
                break
            except torch.OutOfMemoryError as err:
                message, ref, old = str(err), None, None
            budget = self._after_update_oom(message, mbs)
            mbs, oom_retries = self._pack(prompts, rollouts.completion_ids, budget, masked), oom_retries + 1
        # 3) mu optimizer steps, each accumulating gradients over the micro-batches
        opt = self.optimizers()
        sched = self.lr_schedulers()
        no_sync = getattr(self.trainer.strategy, "block_backward_sync", contextlib.nullcontext)
        self.policy.train()
        lr = sched.get_last_lr()[0]  # the rate of this step's (first) update, logged below
        for _ in range(hp.num_iterations):
            while True:
                opt.zero_grad(set_to_none=True)
                try:
                    stats = accumulate_policy_gradients(
                        self.policy, mbs, advantages, self.loss_cfg, self.manual_backward, old, ref, self.ranks, no_sync
                    )
                    break
                except torch.OutOfMemoryError as err:
                    message = str(err)
                # nothing was stepped yet: drop the partial gradients, split every micro-batch in two
                opt.zero_grad(set_to_none=True)
                self._after_update_oom(message, mbs)
                mbs, old, ref = split_microbatches(mbs, old, ref)
                oom_retries += 1
            if hp.max_grad_norm > 0:
                self.clip_gradients(opt, gradient_clip_val=hp.max_grad_norm, gradient_clip_algorithm="norm")
            opt.step()
            sched.step()
        if oom_retries:  # later steps pack within what fit
            self.token_budget_cap = budget = max(mb.input_ids.numel() for mb in mbs)
        update_time = time.perf_counter() - start
        self.phase_memory.end("update", self.device)
        rise = self.phase_memory.rise("update")
        if rise is not None:  # CUDA: the plan of token_budget 'auto' against the measured peak
            self.update_sizer.observe(rise, max(mb.input_ids.numel() for mb in mbs))
        # 4) metrics of the global batch (identical on every rank); times and steps of the slowest rank
        all_rewards, all_lengths = table[:, 0], table[:, 1]
        all_parts = {name: table[:, 4 + i] for i, name in enumerate(parts)}
        st = rollouts.stats
        local = [st["wall_time_s"], update_time, float(st["decode_steps"]), st["slot_utilization"]]
        per_rank = self.ranks.gather(torch.tensor([local], dtype=torch.float64))  # (world, 4)
        metrics = {
            "reward": all_rewards.nanmean(),  # failed rewards (NaN under skip) left out, as TRL does
            "reward_std": nanstd(all_rewards),
            "rewards_failed": table[:, 3].sum(),  # completions with a failed reward (reward_on_error)
            "completion_length": all_lengths.mean(),
            "completion_length_max": all_lengths.max(),
            "completions_truncated": table[:, 2].mean(),  # share that hit max_new_tokens
            "frac_reward_zero_std": zero_std_fraction(all_rewards, hp.group_size),
            "time/rollout_s": per_rank[:, 0].max(),
            "time/update_s": per_rank[:, 1].max(),
            "rollout/decode_steps": per_rank[:, 2].max(),
            "rollout/slot_utilization": per_rank[:, 3].mean(),
            "rollout/tokens_per_s": st["tokens_per_s"],  # generated tokens / rollout wall time (this rank)
            "lr": lr,
            "update/oom_retries": oom_retries,
            "update/token_budget": budget,
            **stats,
            **self.phase_memory.metrics(),  # CUDA: memory/rollout_peak_gb, memory/update_peak_gb, memory/reserved_gb
        }
        if hp.accuracy_reward is not None:
            metrics["accuracy"] = accuracy(all_parts[hp.accuracy_reward])
        for key in SCHEDULE_METRICS:  # this rank's schedule and length-prediction telemetry
            if key in st:
                metrics[f"rollout/{key}"] = float(st[key])
        for name, values in all_parts.items():
            if len(parts) > 1:
                metrics[f"rewards/{name}"] = values.nanmean()
        bs = len(batch)
        self.log_dict({f"train/{k}": float(v) for k, v in metrics.items()}, on_step=True, batch_size=bs)
        self.log("reward", all_rewards.nanmean(), prog_bar=True, on_step=True, batch_size=bs, logger=False)
        for key, value in self.phase_memory.metrics().items():  # the progress bar's postfix, e.g. update_peak_gb
            self.log(key.removeprefix("memory/"), value, prog_bar=True, on_step=True, batch_size=bs, logger=False)
        every = hp.log_completions_every_n_steps
        if every and (self.sampler.calls - 1) % every == 0:  # rollout 1, 1 + N, 1 + 2N, ...
            self._log_completions(batch, rollouts, texts, rewards, parts)
        self._rollout = None

    def _log_completions(
        self, batch: list[dict], rollouts: Rollouts, texts: list[str], rewards: torch.Tensor, parts: dict
    ) -> None:
        """A few samples (one per prompt first) as a table for the loggers and the console."""
        g = rollouts.group_size
        order = [p * g + j for j in range(g) for p in range(len(batch))][: self.hparams.num_completions_to_log]
        decoded = self.tokenizer.batch_decode([rollouts.prompt_ids[i // g] for i in order], skip_special_tokens=True)
        rows = []
        for prompt, i in zip(decoded, order, strict=True):
            prompt = prompt_for_table(batch[i // g].get("prompt_text"), prompt)  # the question, not the system prompt
            row = {"prompt": prompt, "completion": texts[i], "reward": float(rewards[i])}
            row.update({name: float(v[i]) for name, v in parts.items() if len(parts) > 1})
            rows.append(row)
        log_completions(self.trainer.loggers, self.global_step, rows)

    def _pack(
        self, prompts: list[list[int]], completions: list[list[int]], budget: int, finish_reasons: list[str] | None
    ) -> list:
        """The rollout's micro-batches within ``budget`` padded tokens, on this module's device.

        With ``finish_reasons``, completions cut at ``max_new_tokens`` (reason ``length``) get an all-zero
        loss mask: they keep their place in the group's advantages but add nothing to the loss.
        """
        mbs = prepare_microbatches(prompts, completions, budget, self.sampler.pad_id)
        if finish_reasons is not None:
            for mb in mbs:
                for r, row in enumerate(mb.rows):
                    if finish_reasons[row] == "length":
                        mb.completion_mask[r] = 0.0
        return [mb.to(self.device) for mb in mbs]

    def _after_update_oom(self, message: str, mbs: list) -> int:
        """Frees cached memory after the update ran out of device memory with ``mbs``; returns half their size.

        The size of a micro-batch is its padded tokens (rows x columns). Raises a ``torch.OutOfMemoryError``
        that says what to lower when halving cannot help (every micro-batch is one sequence already) or
        when ranks would disagree (data parallel).
        """
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        first = message.splitlines()[0] if message else "out of memory"
        largest = max(mb.input_ids.numel() for mb in mbs)
        if self.ranks.world_size > 1:
            raise torch.OutOfMemoryError(
                f"the update ran out of device memory on rank {self.ranks.rank} with micro-batches of up to "
                f"{largest} tokens ({first}). With several ranks the budget is not lowered automatically (ranks "
                f"must agree): set model.token_budget to {largest // 2} or less."
            )
        if all(len(mb.rows) == 1 for mb in mbs):
            raise torch.OutOfMemoryError(
                f"the update ran out of device memory with one sequence per micro-batch ({first}): a single "
                f"prompt + completion of up to {largest} tokens does not fit. Enable model.gradient_checkpointing, "
                "use LoRA (model.lora_r) or 4-bit weights (model.load_in_4bit), or lower "
                "model.sampler.max_new_tokens."
            )
        warnings.warn(
            f"[infgrpo] the update ran out of device memory with micro-batches of up to {largest} tokens ({first}); "
            f"retrying with half. Set model.token_budget to {largest // 2} or less to skip this.",
            stacklevel=2,
        )
        return max(1, largest // 2)

    def on_train_end(self) -> None:
        """Writes the trained adapter (LoRA) or model to ``output_dir`` (relative: under the run's root),
        when set, from global rank 0, and prints where it went."""
        if self.hparams.output_dir and self.trainer.is_global_zero:
            path = resolve_output_dir(self.hparams.output_dir, self.trainer.default_root_dir)
            path = save_trained(self.policy, self.tokenizer, path)
            print(f"[infgrpo] wrote the trained {'adapter' if self.hparams.lora_r else 'model'} to {path.resolve()}")

    # -- evaluation -------------------------------------------------------------------------
    def validation_step(self, batch: list[dict], batch_idx: int) -> None:
        """Decodes one completion per held-out prompt (``eval_temperature``) and accumulates reward and accuracy."""
        adapt_threads(self.policy, rows=len(batch))
        rollouts = self.eval_sampler.generate_one([b["prompt_ids"] for b in batch], batch_size=len(batch))
        rewards, parts, _, _ = self.score(rollouts, [b["meta"] for b in batch])
        if not rewards.isnan().all():  # failed rewards (NaN under skip) left out
            self.val_reward.update(rewards[~rewards.isnan()])
        acc = parts[self.hparams.accuracy_reward] if self.hparams.accuracy_reward is not None else None
        if acc is not None and not acc.isnan().all():
            self.val_accuracy.update((acc[~acc.isnan()] >= 1.0).float())

    def on_validation_epoch_end(self) -> None:
        """Logs ``val/reward`` and ``val/accuracy`` (reduced over ranks by torchmetrics), then resets them."""
        self.log("val/reward", self.val_reward.compute(), prog_bar=False)
        if self.hparams.accuracy_reward is not None:
            self.log("val/accuracy", self.val_accuracy.compute(), prog_bar=True)
        self.val_reward.reset()
        self.val_accuracy.reset()

    # -- optimization and checkpoints -------------------------------------------------------
    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW over the trainable parameters, with a linear warmup over ``warmup_steps`` optimizer steps.

        The scheduler is stepped by :meth:`training_step` after every optimizer step.
        """
        hp = self.hparams
        params = [p for p in self.policy.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=hp.learning_rate, weight_decay=hp.weight_decay)
        warm = max(hp.warmup_steps, 0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / (warm + 1)) if warm else 1.0)
        return {"optimizer": opt, "lr_scheduler": sched}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Adds the sampler's state (rollout count, length predictor) as ``infgrpo_sampler``, and every
        rank's torch random state (dropout masks) as ``infgrpo_rng`` (all ranks call this hook)."""
        checkpoint["infgrpo_sampler"] = self.sampler.state_dict()
        rng = {"cpu": self.ranks.gather(torch.get_rng_state()[None].to(self.device)).cpu()}  # (world, n)
        if torch.cuda.is_available() and self.device.type == "cuda":
            rng["cuda"] = self.ranks.gather(torch.cuda.get_rng_state(self.device)[None].to(self.device)).cpu()
        checkpoint["infgrpo_rng"] = rng

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restores the sampler's state; keeps the random states for :meth:`on_train_start`."""
        if "infgrpo_sampler" in checkpoint:
            self.sampler.load_state_dict(checkpoint["infgrpo_sampler"])
        self._pending_rng = checkpoint.get("infgrpo_rng")

    def on_train_start(self) -> None:
        """Restores this rank's random state from a resumed checkpoint, so dropout continues exactly.

        Runs after :meth:`on_fit_start` (which seeds each rank); with another number of ranks than the
        checkpoint's, the freshly seeded states are kept.
        """
        rng, self._pending_rng = getattr(self, "_pending_rng", None), None
        if rng is None or rng["cpu"].shape[0] != self.ranks.world_size:
            return
        torch.set_rng_state(rng["cpu"][self.ranks.rank].to(torch.uint8))
        if "cuda" in rng and self.device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"][self.ranks.rank].to(torch.uint8), self.device)
