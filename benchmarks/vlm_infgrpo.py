"""The infgrpo side of ``bench vlm --parts trl``: ``GRPOModule`` and a Lightning ``Trainer`` on the tiny VLM, here.

    result = run_infgrpo(job)     # job: see benchmarks.vlm_job; the seconds of each step, peak memory and the counts

The module is ``configs/vlm-tiny.yaml``'s (LoRA on the language model, the vision tower frozen, ``num_slots`` from
the job, ``update.token_budget`` 4096) with the job's matched settings (:mod:`benchmarks.vlm_trl` lists them); the
data module is the job's (:func:`benchmarks.vlm_job.job_data`), set up before the memory is watched, as on TRL's side.
Everything else is infgrpo's default, the zero-advantage skip included (``update.skip_zero_advantage: auto``: a group
whose rewards are all equal has no gradient, so its rows do not go through the update; TRL runs them).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from typing import Any

import lightning as L
import torch

from benchmarks.harness import threads_setting
from benchmarks.learn_job import TrainingMemory, device_info
from benchmarks.vlm_job import Counts, GCClock, job_data
from infgrpo import GRPOModule

REWARD = "infgrpo.assets.shapes:correct"


class CountedGRPOModule(GRPOModule):
    """``GRPOModule`` unchanged, with its rollout counted as the rollout phase of :class:`Counts` (every forward
    outside the rollout counts as the update's)."""

    counts: Counts | None = None

    def rollout(self, batch: list[dict]) -> Any:
        """``GRPOModule.rollout``, its forwards counted as the rollout's."""
        with self.counts.phase("rollout") if self.counts is not None else contextlib.nullcontext():
            return super().rollout(batch)


class StepSeconds(L.Callback):
    """Wall seconds of each training step (rollout, scoring and the update) and the prompt tokens it prefilled."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.prefill_tokens: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:  # noqa: ANN001
        """Starts the step's clock."""
        self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        """The step's seconds and its rollout's prefilled prompt tokens (the engine's own count)."""
        self.seconds.append(time.perf_counter() - self.start)
        self.prefill_tokens.append(int(pl_module.last_step.rollouts.stats["prefill_tokens"]))


def module_kwargs(job: dict) -> dict[str, Any]:
    """``GRPOModule`` arguments of the job."""
    return dict(
        policy=dict(model_name_or_path=job["model"], dtype="float32"),
        lora=dict(r=job["lora_r"], alpha=job["lora_alpha"], dropout=0.0),  # all-linear: the language model's, a VLM
        group_size=job["group_size"],
        sampler=dict(num_slots=job["slots"], max_new_tokens=job["max_new_tokens"], temperature=1.0, top_k=0, top_p=1.0),
        rewards=dict(functions={REWARD: 1.0}, accuracy=REWARD),
        objective=dict(loss_type="grpo", beta=0.0, scale_rewards="group"),
        optimizer=dict(learning_rate=job["lr"], lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                       max_grad_norm=1.0),  # fmt: skip
        update=dict(token_budget=4096),
        seed=job["seed"],
        threads=threads_setting(job["threads"]),
    )  # fmt: skip


def run_infgrpo(job: dict) -> dict[str, Any]:
    """Trains the job with infgrpo here; returns the seconds of each step, memory and the counts."""
    from transformers import set_seed

    set_seed(job["seed"])  # as the TRL side before its adapter: both start from the same LoRA weights
    module = CountedGRPOModule(**module_kwargs(job))
    data = job_data(job)  # set up before the memory is watched (fit's own setup then returns at once)
    clock = StepSeconds()
    counts = module.counts = Counts(module.policy)
    with tempfile.TemporaryDirectory(prefix="infgrpo-vlm-") as root:
        trainer = L.Trainer(
            max_steps=job["steps"], devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0, callbacks=[clock],
            default_root_dir=root,
        )  # fmt: skip
        with counts.phase("update"), TrainingMemory() as memory, GCClock() as collections:
            trainer.fit(module, data)
    counts.remove()
    trainable = sum(p.numel() for p in module.policy.parameters() if p.requires_grad)
    return {
        "seconds": clock.seconds,
        "counts": counts.result(),
        "engine_prefill_tokens": clock.prefill_tokens,
        "prompt_tokens": sum(len(item["prompt_ids"]) for item in data.train_items),  # steps x prompts: each once
        "trainable_parameters": trainable,
        "torch_threads_end": torch.get_num_threads(),
        **memory.result(),
        **collections.result(),
        **device_info(),
    }
