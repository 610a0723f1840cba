"""The infgrpo side of ``bench learn``: ``GRPOModule``, ``PromptDataModule`` and a Lightning ``Trainer`` here.

    result = train_infgrpo(job)      # job: see benchmarks.learn; writes the adapter to job["adapter_dir"]

Per step (:class:`StepLog`): the reward, the wall seconds of the step and its rollout / update split
as the module logs them (``train/reward``, ``train/time/rollout_s``, ``train/time/update_s``), and
what the step trained on (hashes of its prompts, its number of completions). Around ``fit``: peak RSS
and, on CUDA, the allocator's peaks. The settings the run ended with are read back from the module,
its optimizer and its peft model, not from the job.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable
from typing import Any

import lightning as L
import torch

from benchmarks.harness import threads_setting
from benchmarks.learn_job import (
    VARIANTS,
    TrainingMemory,
    adapter_sha,
    data_kwargs,
    device_info,
    job_rewards,
    lora_settings,
    optimizer_settings,
    out_of_time,
    reward_on_error,
    snapshot_dir,
    snapshot_steps,
    step_record,
)
from infgrpo.data import PromptDataModule
from infgrpo.policy.load import save_trained
from infgrpo.rewards.core import resolve_reward

COUNTED = ("train/dynamic/", "train/adaptive/", "train/update/rows")
"""Metrics a step record keeps besides reward and seconds: dynamic sampling's and adaptive groups' counts, the rows the
update skipped."""


class StepLog(L.Callback):
    """One record per training step: reward, seconds (rollout, update), prompt hashes, completions.

    After each step of ``snapshots`` (counted from 1) it writes the adapter to ``snapshot_dir(adapter_dir, step)``,
    outside the step's seconds.
    """

    def __init__(
        self,
        memory: TrainingMemory,
        snapshots: Iterable[int] = (),
        adapter_dir: str | None = None,
        job: dict | None = None,
    ) -> None:
        self.job = job or {}
        self.steps: list[dict[str, Any]] = []
        self.memory = memory
        self.snapshots, self.adapter_dir = set(snapshots), adapter_dir

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:  # noqa: ANN001
        """Starts the step's clock and records its prompts (the batch Lightning hands the module)."""
        texts, ids = [b["prompt_text"] for b in batch], [b["prompt_ids"] for b in batch]
        self.current = {"step": len(self.steps), **step_record(texts, ids, 0)}
        self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        """The step's seconds and what the module logged for it."""
        seconds = time.perf_counter() - self.start
        metrics = trainer.callback_metrics
        self.current.update(
            seconds=seconds,
            reward=float(metrics["train/reward"]),
            rollout_s=float(metrics["train/time/rollout_s"]),
            update_s=float(metrics["train/time/update_s"]),
            completions=len(pl_module.last_step.rollouts.completion_ids),
            rewards=reward_means(metrics, list(self.job.get("rewards") or [])),
            **{k.removeprefix("train/"): float(v) for k, v in metrics.items() if k.startswith(COUNTED)},
        )
        self.steps.append(self.current)
        phases = pl_module.phase_memory  # CUDA: each phase's peaks (it resets the allocator's between them)
        for phase, allocated in phases.peak_allocated.items():
            self.memory.observe(allocated, phases.peak_reserved.get(phase, 0))
        if len(self.steps) in self.snapshots:
            save_trained(pl_module.policy, pl_module.tokenizer, snapshot_dir(self.adapter_dir, len(self.steps)))
        if out_of_time(self.job, [s["seconds"] for s in self.steps]):  # --minutes: the clock is spent
            trainer.should_stop = True


def reward_means(metrics: dict, names: list[str]) -> dict[str, float]:
    """Each reward's mean over the step's completions, ``{name: mean}``, from what the module logged (with one
    reward only the total, ``train/reward``, is logged: it is that reward's mean at weight 1)."""
    if len(names) == 1:
        return {names[0]: float(metrics["train/reward"])}
    return {name: float(metrics[f"train/rewards/{name}"]) for name in names}


def module_kwargs(job: dict) -> dict[str, Any]:
    """``GRPOModule`` arguments of the job: the matched settings, then the run's ``infgrpo_config`` extras."""
    reward = job["reward_function"]
    kwargs: dict[str, Any] = dict(
        policy=dict(
            model_name_or_path=job["model"], gguf_file=job["gguf_file"], dtype=job["dtype"],
            gradient_checkpointing=job["gradient_checkpointing"],
        ),
        lora=dict(r=job["lora_r"], alpha=job["lora_alpha"], dropout=0.0, target_modules="all-linear"),
        group_size=job["group_size"],
        sampler=dict(max_new_tokens=job["max_new_tokens"], temperature=job["temperature"], top_k=0, top_p=1.0),
        rewards=dict(functions=job_rewards(job), accuracy=reward, on_error=reward_on_error(job)),
        objective=dict(scale_rewards=job["scale_rewards"], loss_type=job["loss_type"], beta=job["beta"]),
        optimizer=dict(
            learning_rate=job["lr"], lr_scheduler_type=job["lr_schedule"], warmup_steps=0, weight_decay=0.0,
            max_grad_norm=1.0,
        ),
        update=dict(share_prompt=job["share_prompt"]),
        output_dir=job["adapter_dir"],
        seed=job["seed"],
        threads=threads_setting(job["threads"]),
    )  # fmt: skip
    extras = {**VARIANTS[job.get("variant") or "default"], **(job.get("infgrpo_config") or {})}
    for key, value in extras.items():  # "group.field" or a top-level key
        group, _, name = key.rpartition(".")
        if group:
            kwargs.setdefault(group, {})[name] = value
        else:
            kwargs[name] = value
    return kwargs


def train_infgrpo(job: dict) -> dict[str, Any]:
    """Trains the job with infgrpo in this process; returns per-step records, memory, settings, adapter hashes."""
    from transformers import set_seed

    from infgrpo import GRPOModule

    set_seed(job["seed"])  # what TRL does before it adds the adapter: both start from the same LoRA weights
    module = GRPOModule(**module_kwargs(job))
    initial = adapter_sha(module.policy)
    data = PromptDataModule(**data_kwargs(job))
    data.setup("fit")  # before the memory is watched, as on the TRL side (fit's own setup then returns at once)
    memory = TrainingMemory()
    log = StepLog(memory, snapshot_steps(job), job["adapter_dir"], {**job, "rewards": job_rewards(job)})
    with tempfile.TemporaryDirectory(prefix="infgrpo-learn-") as root:
        trainer = L.Trainer(
            max_steps=job["steps"],
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            callbacks=[log],
            default_root_dir=root,
        )
        with memory:
            trainer.fit(module, data)
    hp, policy = dict(module.hparams), module.policy
    sampler, opt, obj = hp["sampler"], hp["optimizer"], hp["objective"]
    matched = {
        "model": job["model"],
        "dtype": str(next(policy.parameters()).dtype).removeprefix("torch."),
        "prompts_per_step": data.hparams.batch_size,
        "group_size": hp["group_size"],
        "completions_per_optimizer_step": data.hparams.batch_size * hp["group_size"],
        "chat_template": bool(module.tokenizer.chat_template),
        "max_new_tokens": sampler["max_new_tokens"],
        "temperature": sampler["temperature"],
        "top_p": sampler["top_p"],
        "top_k": sampler["top_k"],
        "stop_token_ids": sorted(module.sampler.stop_ids),
        **lora_settings(policy),
        "learning_rate": opt["learning_rate"],
        "lr_schedule": opt["lr_scheduler_type"] + (f", warmup {opt['warmup_steps']}" if opt["warmup_steps"] else ""),
        **optimizer_settings(trainer.optimizers[0]),
        "max_grad_norm": opt["max_grad_norm"],
        "loss_type": obj["loss_type"],
        "beta": obj["beta"],
        "scale_rewards": obj["scale_rewards"],
        "epsilon_low": obj["epsilon_low"],
        "epsilon_high": obj["epsilon_high"],
        "num_iterations": hp["update"]["num_iterations"],
        "mask_truncated_completions": obj["mask_truncated_completions"],
        "gradient_checkpointing": bool(policy.get_base_model().is_gradient_checkpointing),
        "steps": trainer.global_step,
        "seed": hp["seed"],
        "torch_threads": torch.get_num_threads(),
    }
    called = [resolve_reward(name) for name in hp["rewards"]["functions"]]
    return {
        "per_step": log.steps,
        "reward_funcs": [f"{fn.__module__}.{fn.__qualname__}" for fn in called],
        **memory.result(),
        **device_info(),
        "initial_adapter_sha": initial,
        "final_adapter_sha": adapter_sha(policy),
        "matched": matched,
        "settings": {**hp, "share_prompt_resolved": module.updater.share_prompt},
    }
