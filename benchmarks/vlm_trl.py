"""The TRL side of ``bench vlm --parts trl``: TRL 1.16's ``GRPOTrainer`` on the tiny VLM, in this process.

    result = run_trl(job)     # job: see benchmarks.vlm_job; the seconds of each step, peak memory and the counts

What is the same as on the infgrpo side (:mod:`benchmarks.vlm_infgrpo`):

- the model: ``load_policy(model)`` without LoRA (its vision side frozen, as infgrpo's default), float32; the adapter
  from ``peft_config``, a ``LoraConfig`` with infgrpo's targets for a VLM (the language model's linear layers),
  r, alpha, dropout 0; ``set_seed(seed)`` before it is added, on both sides;
- the processor: :func:`infgrpo.vision.processor.load_processor` (the stock Qwen2.5-VL processor without its video
  part where torchvision cannot load) as ``processing_class``;
- the rows: the shipped shapes rows in TRL's format (``prompt``, ``image``, ``answer``), in the order infgrpo's data
  module feeds them, with ``shuffle_dataset=False``; the prompt ids TRL renders are checked equal to infgrpo's;
- the reward: the task's own ``infgrpo.assets.shapes:correct`` (TRL's signature);
- the settings of :func:`trl_config`: G, prompts a step, max_new_tokens, temperature 1 without top-k / top-p, lr
  (constant), ``loss_type`` grpo, ``beta`` 0, one iteration, no gradient checkpointing (TRL's default is on).

TRL needs nothing else to run offline on a CPU: ``use_cpu=True``, ``bf16=False``, ``report_to=[]``; its generation
is transformers' ``generate`` (``use_vllm`` defaults to False).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from typing import Any

import torch
from transformers import TrainerCallback, set_seed
from trl import GRPOConfig, GRPOTrainer

from benchmarks.learn_job import TrainingMemory, device_info
from benchmarks.vlm_job import Counts, GCClock, job_data, lora_kwargs, ordered_rows


class CountedGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` unchanged, with its generation counted as the rollout phase of :class:`Counts` and the
    prompt ids it renders kept (every forward outside the generation counts as the update's)."""

    counts: Counts | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.observed_prompt_ids: list[list[int]] = []
        super().__init__(*args, **kwargs)

    def _generate_single_turn(self, prompt_ids: list, *args: Any, **kwargs: Any) -> Any:
        self.observed_prompt_ids += [[int(t) for t in ids] for ids in prompt_ids]
        with self.counts.phase("rollout") if self.counts is not None else contextlib.nullcontext():
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)


class StepSeconds(TrainerCallback):
    """Wall seconds of each optimizer step (generation, scoring and the update)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs) -> None:  # noqa: ANN001
        """Starts the step's clock."""
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs) -> None:  # noqa: ANN001
        """The step's seconds."""
        self.seconds.append(time.perf_counter() - self.start)


def trl_config(job: dict, output_dir: str) -> GRPOConfig:
    """The ``GRPOConfig`` of the job: one generation of prompts x G a step, in TRL's default micro-batches of 8 rows
    accumulated over the step (``steps_per_generation`` = the accumulation steps: no old-policy pass)."""
    rows = job["prompts"] * job["group_size"]
    micro = min(8, rows)
    cuda = torch.cuda.is_available()
    return GRPOConfig(
        output_dir=output_dir, num_generations=job["group_size"], per_device_train_batch_size=micro,
        gradient_accumulation_steps=rows // micro, max_completion_length=job["max_new_tokens"], temperature=1.0,
        top_p=1.0, top_k=0, learning_rate=job["lr"], lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, loss_type="grpo", beta=0.0, scale_rewards="group", epsilon=0.2, num_iterations=1,
        activation_checkpointing=False, use_cpu=not cuda, bf16=False, fp16=False, shuffle_dataset=False,
        max_steps=job["steps"], seed=job["seed"], report_to=[], logging_steps=1, save_strategy="no",
        disable_tqdm=True, dataloader_num_workers=0,
    )  # fmt: skip


def run_trl(job: dict) -> dict[str, Any]:
    """Trains the job with TRL's ``GRPOTrainer`` here; returns the seconds of each step, memory and the counts."""
    from datasets import Dataset
    from peft import LoraConfig

    from infgrpo.assets.shapes import correct
    from infgrpo.policy.load import load_policy
    from infgrpo.vision.parts import language_lora_targets
    from infgrpo.vision.processor import load_processor

    # 1) infgrpo's rows in infgrpo's order, the processor, the model
    rows = ordered_rows(job_data(job), job["steps"])
    ours = [row.pop("prompt_ids") for row in rows]
    dataset = Dataset.from_list(rows)
    processor = load_processor(job["model"])
    model = load_policy(job["model"], dtype="float32")  # the vision side frozen, no adapters yet
    lora = LoraConfig(**lora_kwargs(job, language_lora_targets(model)))
    # 2) the trainer, as a TRL user builds it
    clock = StepSeconds()
    set_seed(job["seed"])  # TRL adds the adapter in __init__; the infgrpo side seeds right before it builds its own
    with tempfile.TemporaryDirectory(prefix="infgrpo-vlm-trl-") as out:
        trainer = CountedGRPOTrainer(
            model=model, reward_funcs=[correct], args=trl_config(job, out), train_dataset=dataset,
            processing_class=processor, peft_config=lora, callbacks=[clock],
        )  # fmt: skip
        counts = trainer.counts = Counts(trainer.model)
        with counts.phase("update"), TrainingMemory() as memory, GCClock() as collections:
            trainer.train()
        counts.remove()
    g = job["group_size"]
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    return {
        "seconds": clock.seconds,
        "counts": counts.result(),
        "same_prompt_ids": trainer.observed_prompt_ids[::g] == ours,  # TRL renders the prompts infgrpo decodes from
        "prompt_tokens": sum(map(len, ours)),
        "trainable_parameters": trainable,
        **memory.result(),
        **collections.result(),
        **device_info(),
    }
