"""GRPOModule: the LightningModule that wires sampler, rewards and the GRPO objective together.

    module = GRPOModule(policy=PolicyConfig("tiny"), group_size=8, sampler=SamplerConfig(num_slots=8))
    L.Trainer(max_steps=20).fit(module, PromptDataModule(path="tiny", batch_size=4))
    GRPOModule(lora={"r": 16}, objective={"loss_type": "dapo"}, optimizer={"learning_rate": 3e-4})  # mappings do

One training step reads like docs/architecture.md's step, hop by hop: rollout (:class:`~infgrpo.MicroGroupSampler`,
no gradients) -> scores (:mod:`infgrpo.scoring`) -> group advantages (:mod:`infgrpo.algo`) -> update
(:class:`~infgrpo.update.runner.PolicyUpdate`: ``num_iterations`` optimizer steps over token-budget
micro-batches) -> metrics (:mod:`infgrpo.training.metrics`). Under DDP each rank samples its contiguous
share of the global batch with streams keyed by the *global* prompt index (the completions one process
would draw); batch-wide quantities are gathered over :class:`~infgrpo.runtime.ranks.Ranks`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import lightning as L
import torch

from infgrpo.agent import AgentConfig
from infgrpo.algo import ADVANTAGES, Objective
from infgrpo.callbacks.completion_table import CompletionTable
from infgrpo.evaluation import EvaluationConfig, HeldoutMeans, evaluation_sampler_config
from infgrpo.policy.config import LoRAConfig, PolicyConfig, QuantizationConfig, load_kwargs
from infgrpo.policy.load import frozen_reference, load_policy, load_tokenizer
from infgrpo.policy.source import check_model_source
from infgrpo.rewards import TrainerState
from infgrpo.rewards.config import RewardConfig
from infgrpo.runtime.memory import PhaseMemory
from infgrpo.runtime.ranks import Ranks
from infgrpo.runtime.threads import set_threads
from infgrpo.sampler import MicroGroupSampler, Rollouts, SamplerConfig
from infgrpo.scoring import Scorer, Scores, trainer_state
from infgrpo.trainer.policy_sharding import PolicySharding
from infgrpo.training.adaptive import AdaptiveGroupsConfig
from infgrpo.training.agent_rollout import AgentRollout
from infgrpo.training.checkpoint_state import PolicyCheckpoint
from infgrpo.training.collapse import CollapseWatch
from infgrpo.training.divergence import check_update
from infgrpo.training.dynamic import DynamicSamplingConfig
from infgrpo.training.hparams import LoggingConfig, check_settings, resumed_seed
from infgrpo.training.judged_rollout import JudgedRollout
from infgrpo.training.metrics import StepRecord, progress_bar, step_metrics
from infgrpo.training.optim import OptimizerConfig, adamw_for_run
from infgrpo.training.preflight.door import check_fit_start
from infgrpo.training.preflight.files import RunOutput
from infgrpo.training.preflight.fit_start import move_reward_models, warn_slow_cpu_dtype
from infgrpo.training.preflight.trainer_check import check_sharded_mesh
from infgrpo.training.run_state import RunState, trainer_ranks
from infgrpo.training.step_rollout import StepRollout
from infgrpo.update.config import UpdateConfig
from infgrpo.update.logprobs import check_chunked_head
from infgrpo.update.runner import PolicyUpdate
from infgrpo.upgrade_checkpoint import upgrade_hint


class GRPOModule(L.LightningModule):
    """GRPO with micro-group rollouts and memory that does not grow with the group size.

    Every setting lives in a group, one YAML block each (``model.<group>.<field>`` on the command line); a
    group is given as its dataclass or a mapping of its fields, and is checked where it is built, before
    anything loads (errors name ``group.field``, the value and what is valid).

    Args:
        policy: the model trained: hub id or folder, GGUF file, dtype, gradient checkpointing.
        lora: LoRA adapters (``r: 0`` = full fine-tuning).
        quantization: 4-bit base weights (bitsandbytes; needs LoRA).
        group_size: completions sampled per prompt (G >= 2; TRL's ``num_generations``). Rollout memory does
            not depend on it.
        sampler: rollout sampling: the KV slot pool, decoding, and length-aware scheduling.
        rewards: reward functions and weights, the accuracy reward, what a failed reward does.
        objective: what the update minimizes: advantages, loss type, clipping, KL, entropy, corrections
            (TRL 1.16's names and definitions).
        update: how the update runs: iterations, token-budget micro-batches, shared prompts, the LM head's chunks.
        optimizer: AdamW, warmup, learning-rate schedule, gradient clipping.
        evaluation: held-out evaluation (its temperature).
        logging: completion tables.
        dynamic_sampling: replace groups whose rewards are all equal during the rollout (DAPO; off by default).
        adaptive_groups: give a prompt whose group has no reward spread more samples during the rollout, and
            train on the ``group_size`` of largest reward variance (off by default).
        agent: tools and environments the completions call (TRL's ``tools=``, ``environment_factory=``; off by default).
        output_dir: at the end of fit, write the trained LoRA adapter (a peft adapter folder) or, without
            LoRA, the whole model here. A relative path is under the run's root (``trainer.default_root_dir``;
            the working directory when unset), e.g. ``adapter``.
        seed: base seed of the rollout random streams; None (the default): the run's ``seed_everything``.
        threads: torch CPU threads: 'auto' (default) picks, before each rollout and update, as many as the work
            can use and the cores other processes leave free (torch's default, one per core, collapses when
            another process keeps a core busy: 28x slower on 2 cores); an integer fixes the count
            (bit-identical CPU runs across machines). See infgrpo.runtime.threads.
    """

    def __init__(
        self,
        policy: PolicyConfig = PolicyConfig(),  # noqa: B008 - copied; a dataclass gives one YAML block
        lora: LoRAConfig = LoRAConfig(),  # noqa: B008
        quantization: QuantizationConfig = QuantizationConfig(),  # noqa: B008
        group_size: int = 8,
        sampler: SamplerConfig = SamplerConfig(),  # noqa: B008
        rewards: RewardConfig = RewardConfig(),  # noqa: B008
        objective: Objective = Objective(),  # noqa: B008
        update: UpdateConfig = UpdateConfig(),  # noqa: B008
        optimizer: OptimizerConfig = OptimizerConfig(),  # noqa: B008
        evaluation: EvaluationConfig = EvaluationConfig(),  # noqa: B008
        logging: LoggingConfig = LoggingConfig(),  # noqa: B008
        dynamic_sampling: DynamicSamplingConfig = DynamicSamplingConfig(),  # noqa: B008
        adaptive_groups: AdaptiveGroupsConfig = AdaptiveGroupsConfig(),  # noqa: B008
        agent: AgentConfig = AgentConfig(),  # noqa: B008
        output_dir: str | None = None,
        seed: int | None = None,
        threads: int | Literal["auto"] = "auto",
    ) -> None:
        super().__init__()
        # 1) validate everything a user can set, before loading anything
        s = self.settings = check_settings(
            policy=policy, lora=lora, quantization=quantization, group_size=group_size, sampler=sampler,
            rewards=rewards, objective=objective, update=update, optimizer=optimizer, evaluation=evaluation,
            logging=logging, dynamic_sampling=dynamic_sampling, adaptive_groups=adaptive_groups, agent=agent,
            output_dir=output_dir, seed=seed, threads=threads,
        )  # fmt: skip
        self.save_hyperparameters(s.hparams())  # plain nested dicts, the seed resolved
        self._seed_given = seed is not None  # a derived seed follows a resumed checkpoint's (on_load_checkpoint)
        self.automatic_optimization = False
        set_threads(s.threads)  # process-wide: torch has one intra-op pool
        # 2) the policy, its tokenizer and (full fine-tuning with beta > 0) a frozen reference
        check_model_source(s.policy.model_name_or_path, s.policy.gguf_file, "policy.model_name_or_path")
        self.tokenizer = load_tokenizer(s.policy.model_name_or_path, s.policy.gguf_file)
        self.agent = AgentRollout(s.agent, self.tokenizer, s.group_size) if s.agent.enabled else None  # tools
        self.policy = load_policy(**load_kwargs(s.policy, s.lora, s.quantization)).train()
        check_chunked_head(self.policy, s.update.logit_chunk_tokens)  # refuses models whose logits it cannot match
        self._ref: list = [frozen_reference(self.policy)] if s.objective.beta > 0 and s.lora.r == 0 else []
        # 3) the samplers (evaluation: the training settings but its temperature, FIFO, no pool kept)
        self.sampler = MicroGroupSampler(self.policy, self.tokenizer, s.sampler)
        self.eval_sampler = MicroGroupSampler(
            self.policy, self.tokenizer, evaluation_sampler_config(s.sampler, s.evaluation)
        )
        # 4) the update, and the state of a run
        self.updater = PolicyUpdate.for_run(self.policy, s.update, s.objective, s.sampler, self.sampler.pad_id)
        self.scorer = Scorer(
            self.tokenizer, s.rewards.functions, s.rewards.on_error, s.sampler.max_new_tokens, self.progress,
            self.agent.sources if self.agent is not None else {},
        )  # fmt: skip
        self.judged = JudgedRollout.for_run(s, self.sampler, self.scorer, self.agent)  # None unless judged as they end
        self.rollouts = StepRollout(self.sampler, self.scorer, self.agent, self.judged)  # a step's rollout path
        self.heldout = HeldoutMeans()  # val/reward and val/accuracy of each validation epoch
        self.ranks, self._no_sync = Ranks(), contextlib.nullcontext  # the data-parallel ranks, known once fit starts
        self.sharding = PolicySharding()  # unsharded: a no-op; configure_model makes it from a sharding strategy
        self.phase_memory = PhaseMemory()  # peaks (CUDA) and windows of the rollout and the update; CPU: trims the heap
        self.last_step: StepRecord | None = None  # read by the CompletionTable callback and benchmarks
        self.collapse = CollapseWatch(s.optimizer, s.rewards)  # warns once: entropy and reward spread at 0, no reward
        self._resume = RunState()  # a resumed checkpoint's random states and streams (on_load_checkpoint)
        self.output = RunOutput(s.output_dir, "adapter" if s.lora.r else "model")  # fit exits 1 when it was rescued
        self.contents = PolicyCheckpoint(s.policy, s.quantization)  # LoRA: checkpoints hold what trains, the base named

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any) -> GRPOModule:  # noqa: D417
        """Lightning's ``load_from_checkpoint``; a checkpoint of infgrpo 0.1 (flat hyper-parameters) is one error
        naming :mod:`infgrpo.upgrade_checkpoint`, the command that upgrades it (checked only when loading fails)."""
        with upgrade_hint(checkpoint_path):
            return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)

    @property
    def ref_model(self) -> torch.nn.Module | None:
        """The frozen KL reference of full fine-tuning (``beta > 0``, ``lora.r == 0``), else None (with LoRA the
        reference is the policy with its adapters disabled). Held in a plain list, so it is no registered
        submodule: it stays out of the checkpoint, and :meth:`on_fit_start` moves it to the device."""
        return self._ref[0] if self._ref else None

    def configure_callbacks(self) -> list[L.Callback]:
        """The completion table, when ``log_completions_every_n_steps`` is set."""
        every = self.settings.logging.log_completions_every_n_steps
        return [CompletionTable(every, self.settings.logging.num_completions_to_log)] if every else []

    def configure_model(self) -> None:
        """Under a sharding strategy (``trainer.strategy: fsdp2``, Lightning's ``ModelParallelStrategy``): shards the
        policy, and the frozen reference of full fine-tuning, over the data-parallel mesh (FSDP2: each decoder layer,
        then the root; see :class:`~infgrpo.trainer.policy_sharding.PolicySharding`), and decodes without CUDA graphs
        (each step gathers the weights anew, at other addresses). Nothing otherwise."""
        mesh = self._device_mesh
        if mesh is None or self.sharding.active:
            return
        check_sharded_mesh(mesh, self.trainer.strategy, self.settings)
        self.sharding = PolicySharding.shard(mesh, self.policy, self.ref_model, self.sampler.pad_id)
        for sampler in (self.sampler, self.eval_sampler):  # the gathered weights move between steps: no graphs
            sampler.disable_cuda_graphs()

    def setup(self, stage: str) -> None:
        """With ``model.agent`` the data module renders its prompts with the tool schemas and the agent renders image
        prompts through its processor (:meth:`~infgrpo.training.step_rollout.StepRollout.use_data`)."""
        self.rollouts.use_data(self.trainer.datamodule)

    def teardown(self, stage: str) -> None:
        """Ends the tool threads as fit (or a validation) ends; a later rollout makes new ones."""
        self.rollouts.close()

    def on_fit_start(self) -> None:
        """Moves the frozen reference (if any) to the module's device, runs the preflight's checks for the Python API
        (every prompt against the context, ...), moves reward models and learns the data-parallel ranks. On a CPU,
        warns once when the weights' dtype has no native support there (see infgrpo.runtime.hardware)."""
        warn_slow_cpu_dtype(self.settings.policy, self.settings.quantization, self.device)
        if self.ref_model is not None:
            self.ref_model.to(self.device)
        check_fit_start(self)  # the preflight's steps for the Python API (infgrpo.training.preflight.door.STEPS)
        move_reward_models(self.settings.rewards.functions, self.device, self.policy.dtype)
        self.setup_ranks()

    def setup_ranks(self) -> None:
        """Learns the data-parallel ranks from the trainer (each rollout and update gets them; see run_state)."""
        self.ranks, self._no_sync = trainer_ranks(self.trainer, self.all_gather, self.device)

    # -- one GRPO step ----------------------------------------------------------------------
    def rollout(self, batch: list[dict]) -> tuple[Rollouts, Scores, list[dict]]:
        """``group_size`` completions of every prompt of ``batch`` (no gradients), their scores and the items they
        belong to (:meth:`~infgrpo.training.step_rollout.StepRollout.__call__`), decoded with the full weights."""
        phases = self.phase_memory.phase("rollout", self.device), self.sharding.rollout(self.device)
        return self.rollouts(batch, self.settings, self.trainer, self.ranks, phases)

    def training_step(self, batch: list[dict], batch_idx: int) -> None:
        """One GRPO step on ``batch``: rollout, scores, group advantages, ``num_iterations`` optimizer steps, metrics.

        Advantages need only this rank's groups; the batch-wide std (``scale_rewards: batch``) and the metrics use
        every rank's rows. Manual optimization: the update steps the optimizer and the scheduler itself."""
        s = self.settings
        rollouts, scores, items = self.rollout(batch)  # G completions of each prompt, no gradients; (N,) scores
        lr = self.lr_schedulers().get_last_lr()[0]  # the rate of this step's (first) optimizer step
        with self.phase_memory.phase("update", self.device):
            batch_scores = scores.gather(self.ranks)  # (N_global,): for the batch std and the metrics
            advantages = ADVANTAGES.get(s.objective.advantage)(
                scores.total, s.group_size, s.objective.scale_rewards, batch_rewards=batch_scores.total
            )  # (N,)
            with self.sharding.update():  # sharded: the full weights, gradients accumulated unsharded
                update = self.updater.run(
                    self.policy, rollouts, advantages, self.manual_backward, self._optimizer_step, self._zero_grad,
                    self.ref_model, self.ranks, self._no_sync,
                )  # fmt: skip
        check_update(update.stats["loss"], self.policy, s, self.trainer)  # non-finite loss, gradient or weights: stop
        self.updater.observe(self.phase_memory.rise("update"), update)
        times = (rollouts.stats["wall_time_s"], self.phase_memory.seconds("update"))
        metrics = step_metrics(
            batch_scores, rollouts, update.metrics(), times, self.ranks, lr, self.phase_memory.metrics(),
            s.group_size, s.rewards.accuracy,
        )  # fmt: skip
        metrics.update(scores.metrics)  # what the rewards logged (log_metric), this rank's mean
        self.collapse(metrics, self.global_step)
        self.log_dict({f"train/{k}": v for k, v in metrics.items()}, on_step=True, batch_size=len(items))
        self.log_dict(progress_bar(metrics), prog_bar=True, on_step=True, batch_size=len(items), logger=False)
        self.last_step = StepRecord(items, rollouts, scores, self.sampler.calls - 1)

    def progress(self) -> TrainerState:
        """The run's progress as TRL's reward functions read it (``trainer_state``; see :func:`trainer_state`)."""
        return trainer_state(self._trainer)

    def _optimizer_step(self) -> None:
        """Clips the gradient (``max_grad_norm``), steps the optimizer and the learning-rate scheduler. Sharded:
        first reduce-scatters the accumulated gradients, after the step frees the stale gathered parameters."""
        opt, clip = self.optimizers(), self.settings.optimizer.max_grad_norm
        with self.sharding.optimizer_step():
            if clip > 0:
                self.clip_gradients(opt, gradient_clip_val=clip, gradient_clip_algorithm="norm")
            opt.step()
            self.lr_schedulers().step()

    def _zero_grad(self) -> None:
        """Drops the gradients (set to None). Sharded: gathers the parameters the last optimizer step changed, as
        each of the update's ``num_iterations`` starts here (a no-op where they are gathered)."""
        self.optimizers().zero_grad(set_to_none=True)
        self.sharding.after_zero_grad()

    def on_train_end(self) -> None:
        """Writes ``output_dir`` (:meth:`write_output`), unless a signal's stop wrote it already."""
        self.write_output()

    def write_output(self) -> None:
        """Writes the trained adapter (LoRA) or model to ``output_dir`` once, on every rank's call (see
        :func:`~infgrpo.training.preflight.files.write_output_dir`): at the end of fit, or first thing when a signal
        stops the run (:class:`~infgrpo.callbacks.interruption.Interruption`), before Lightning's evaluation. Beside
        it go the tokenizer's files, or with image prompts the data module's processor's (its image settings too)."""
        processor = getattr(self.trainer.datamodule, "processor", None)  # image prompts: the processor goes along
        self.output.write(self.trainer, self.policy, processor or self.tokenizer, self.sharding.full_state)

    # -- evaluation -------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        """Sharded: gathers the parameters for the evaluation's decode (each rank its own number of steps)."""
        self.sharding.start_evaluation()

    def validation_step(self, batch: list[dict], batch_idx: int) -> None:
        """Decodes one completion per held-out prompt (``evaluation.temperature``) and accumulates reward and
        accuracy."""
        scores = self.rollouts.heldout(self.eval_sampler, batch, self.trainer.datamodule)  # with tools, if any
        self.heldout.update(scores, self.settings.rewards.accuracy)

    def on_validation_epoch_end(self) -> None:
        """Logs ``val/reward`` and ``val/accuracy`` (reduced over ranks by torchmetrics), then resets them."""
        for key, mean in self.heldout.compute(self.settings.rewards.accuracy).items():
            self.log(f"val/{key}", mean, prog_bar=key == "accuracy")
        self.sharding.end_evaluation()  # sharded: back to 1/N of the parameters

    # -- optimization and checkpoints -------------------------------------------------------
    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW over the trainable parameters and the rate's schedule (the update steps both after each optimizer
        step; see :func:`~infgrpo.training.optim.adamw_for_run`)."""
        return adamw_for_run(self.policy, self.settings.optimizer, self.trainer, self.settings.update.num_iterations)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Adds the sampler's, the update's and the run's states (:class:`~infgrpo.training.run_state.RunState`); under
        LoRA keeps the weights that train and names the base (:mod:`~infgrpo.training.checkpoint_state`)."""
        RunState.write(checkpoint, self.sampler, self.updater, self.ranks, self.device, self._trainer)
        self.contents.write(checkpoint, self, sharded=self.sharding.active)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restores the sampler's and the update's states; keeps the random states for :meth:`on_train_start`.

        A run resumes with the rollout seed it started with: a seed derived from ``seed_everything`` (``seed:
        null``) becomes the checkpoint's; an explicit one that differs is kept, with a warning.
        """
        self.contents.read(checkpoint, self)  # a LoRA checkpoint: its base checked, then completed from the module's
        self.settings = resumed_seed(self.settings, self._seed_given, checkpoint.get("hyper_parameters"))
        self.hparams["seed"] = self.settings.seed
        self._resume = RunState.read(checkpoint, self.sampler, self.updater)  # the rest when training starts

    def on_train_start(self) -> None:
        """Restores this rank's random state from a resumed checkpoint, so dropout continues exactly.

        Runs after :meth:`on_fit_start` (which seeds each rank); with another number of ranks than the
        checkpoint's, the freshly seeded states are kept.
        """
        self._resume.restore(self.ranks, self.device, self.trainer.datamodule)
        self._resume = RunState()
