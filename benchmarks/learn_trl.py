"""The TRL side of ``bench learn``: TRL 1.16's ``GRPOTrainer`` on infgrpo's job, in this process.

    result = train_trl(job)          # job: see benchmarks.learn; writes the adapter to job["adapter_dir"]

What is shared with the infgrpo side, so the job is the same:

- the model: an instance loaded by :func:`infgrpo.policy.load_policy` (no LoRA), and the tokenizer by
  :func:`~infgrpo.policy.load_tokenizer` (its chat template); the adapter from ``peft_config``, a
  ``LoraConfig`` equal to the one ``load_policy`` builds (r, alpha, dropout 0, all-linear). TRL seeds
  (``set_seed(seed)``) right before it adds the adapter; the infgrpo child does the same, so both
  adapters start equal (``initial_adapter_sha``);
- the data: the job's :class:`~infgrpo.data.PromptDataModule`, its first ``steps`` batches in the order
  Lightning feeds them to infgrpo, given to TRL as a dataset in that order with ``shuffle_dataset=False``
  (each row a user turn, conversational when the tokenizer has a chat template, as infgrpo encodes it);
- the reward: infgrpo's reward by name through :func:`infgrpo.rewards.score_rewards`, behind TRL's
  reward signature, on each row's metadata (found by the row's ``infgrpo_index``);
- with ``--format trl``: the job's ``train.jsonl`` read as a ``datasets.Dataset`` (``Dataset.from_json``), its rows
  selected in infgrpo's order (checked row by row against the items infgrpo draws), and TRL's own
  ``trl.rewards.accuracy_reward`` as ``reward_funcs`` (no wrapper; what it returned is observed in
  ``_calculate_rewards``); with ``--recipe boxed`` also the format reward of :mod:`~benchmarks.learn_rewards`, the
  function itself, before it (``reward_weights`` 1 and 1);
- the settings of :func:`trl_config`, each read back from the trainer after training (``matched``).

Per step: seconds (``on_step_begin`` to ``on_step_end``: generation, scoring and the update) and the
generation's share (``_generate_and_score_completions``, observed by :class:`ObservedGRPOTrainer`),
the reward TRL logged (and the mean our function returned), and what the step trained on: the prompts
TRL's reward function received and the prompt token ids TRL generated from (``_tokenize_prompts``).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from benchmarks.learn_job import (
    TrainingMemory,
    adapter_sha,
    device_info,
    is_trl_format,
    job_data,
    job_rewards,
    lora_settings,
    optimizer_settings,
    ordered_batches,
    out_of_time,
    snapshot_dir,
    snapshot_steps,
    step_record,
)
from infgrpo.data import PromptDataModule
from infgrpo.data.conversation import last_user_text
from infgrpo.policy.load import load_policy, load_tokenizer
from infgrpo.rewards import score_rewards


class ObservedGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` unchanged, plus three observations: the prompt ids it tokenized, its generation time,
    and what its reward functions were given and returned (one record per generation batch)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.observed_prompt_ids: list[list[list[int]]] = []
        self.generation_s: list[float] = []
        self.observed_rewards: list[dict[str, Any]] = []
        super().__init__(*args, **kwargs)

    def _calculate_rewards(self, inputs: list[dict], prompts: list, completions: list, completion_ids: list) -> Any:
        out = super()._calculate_rewards(inputs, prompts, completions, completion_ids)
        self.observed_rewards.append(
            {
                "users": [last_user_text(p) for p in prompts],
                "conversational": all(isinstance(c, list) for c in completions),
                "values": out.detach().float().cpu().tolist(),  # (rows, reward functions); None -> NaN
            }
        )
        return out

    def _tokenize_prompts(self, prompts: list) -> Any:
        out = super()._tokenize_prompts(prompts)
        self.observed_prompt_ids.append([[int(t) for t in ids] for ids in out[0]])
        return out

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        start = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)
        self.generation_s.append(time.perf_counter() - start)
        return out


class StepClock(TrainerCallback):
    """Wall seconds of each optimizer step and the reward TRL logged for it."""

    def __init__(self, job: dict | None = None) -> None:
        self.seconds: list[float] = []
        self.rewards: dict[int, float] = {}
        self.job = job or {}

    def on_step_begin(self, args, state, control, **kwargs) -> None:  # noqa: ANN001
        """Starts the step's clock (before its generation)."""
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs) -> None:  # noqa: ANN001
        """The step's seconds (after its optimizer step); stops the run when the job's clock is spent."""
        self.seconds.append(time.perf_counter() - self.start)
        if out_of_time(self.job, self.seconds):
            control.should_training_stop = True

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:  # noqa: ANN001
        """The reward TRL logged for the step (``logging_steps=1``: every step)."""
        if logs and "reward" in logs:
            self.rewards[state.global_step - 1] = float(logs["reward"])


class Snapshots(TrainerCallback):
    """Writes the adapter after each optimizer step of ``steps`` (counted from 1) to ``snapshot_dir(adapter_dir, k)``.

    After :class:`StepClock` in the callback list, so the writing is outside the step's seconds.
    """

    def __init__(self, steps: list[int], adapter_dir: str) -> None:
        self.steps, self.adapter_dir = set(steps), adapter_dir

    def on_step_end(self, args, state, control, model=None, **kwargs) -> None:  # noqa: ANN001
        """The adapter as it is after this step, when the step is one of ``steps``."""
        if state.global_step in self.steps:
            model.save_pretrained(snapshot_dir(self.adapter_dir, state.global_step))


def trl_reward(name: str, items: list[dict], group_size: int, max_len: int, records: list[dict]) -> Any:
    """infgrpo's reward ``name`` with TRL's signature; each call (one generation batch) adds to ``records``.

    Checks that the batch is whole groups in order (each prompt ``group_size`` times in a row) and that
    each row's prompt is the one its ``infgrpo_index`` names.
    """

    def reward(prompts: list, completions: list, completion_ids: list, infgrpo_index: list[int], **_: Any) -> list:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        users = [p[-1]["content"] if isinstance(p, list) else p for p in prompts]  # the user turns received
        if any(users[i] != items[k]["prompt_text"] for i, k in enumerate(infgrpo_index)):
            raise ValueError("a prompt TRL passed to the reward is not the row its infgrpo_index names")
        firsts = infgrpo_index[::group_size]
        if list(infgrpo_index) != [k for k in firsts for _ in range(group_size)]:
            raise ValueError(f"TRL's generation batch is not whole groups of {group_size} in order: {infgrpo_index}")
        metas = [items[k]["meta"] for k in infgrpo_index]
        lengths = [len(ids) for ids in completion_ids]
        scores = score_rewards({name: 1.0}, texts, metas, "raise", lengths, max_len).total.tolist()
        records.append({"users": users[::group_size], "completions": len(completions), "reward_fn_mean": scores})
        return scores

    reward.__name__ = name  # TRL logs rewards/<name>/mean
    return reward


def nan_mean(values: list[float]) -> float:
    """The mean of the values that are not NaN (NaN when none is)."""
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def observed_record(rec: dict, group_size: int, rewards: dict[str, float]) -> dict[str, Any]:
    """One generation batch's record (:func:`trl_reward`'s fields, and ``rewards``: each function's mean, by the
    names of ``rewards``, ``{name: weight}`` in TRL's ``reward_funcs`` order) from what ``_calculate_rewards`` was
    given and returned (``--format trl``, where TRL calls the functions itself); a ValueError unless the batch is
    whole groups. Each row's reward is TRL's: the weighted sum of the values that are not None (NaN-sum)."""
    users = rec["users"]
    if any(len(set(users[i : i + group_size])) != 1 for i in range(0, len(users), group_size)):
        raise ValueError(f"TRL's generation batch is not whole groups of {group_size} in order: {users}")
    weights = list(rewards.values())
    totals = [
        sum(w * v for w, v in zip(weights, row, strict=True) if not math.isnan(v))
        for row in rec["values"]  # NaN where a function returned None
        if not all(math.isnan(v) for v in row)
    ]
    means = {name: nan_mean([row[k] for row in rec["values"]]) for k, name in enumerate(rewards)}
    return {"users": users[::group_size], "completions": len(users), "reward_fn_mean": totals or [math.nan],
            "rewards": means}  # fmt: skip


def trl_config(job: dict, output_dir: str) -> GRPOConfig:
    """The ``GRPOConfig`` that matches the job (every field named, none left to TRL's defaults where they differ).

    One optimizer step sees ``prompts`` x ``group_size`` completions: micro-batches of ``trl_micro_batch``
    rows (TRL's default ``per_device_train_batch_size``, 8) accumulated over the rest, generated at once
    (``steps_per_generation`` = the accumulation steps, so ``generation_batch_size`` = prompts x G).
    """
    rows = job["prompts"] * job["group_size"]
    micro = min(job["trl_micro_batch"], rows)
    cuda = torch.cuda.is_available()
    return GRPOConfig(
        output_dir=output_dir,
        num_generations=job["group_size"],
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=rows // micro,
        max_completion_length=job["max_new_tokens"],
        temperature=job["temperature"],
        top_p=1.0,
        top_k=0,
        learning_rate=job["lr"],
        lr_scheduler_type=job["lr_schedule"],  # transformers' schedule over max_steps, as infgrpo's
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        loss_type=job["loss_type"],
        beta=job["beta"],
        scale_rewards=job["scale_rewards"],
        epsilon=0.2,
        num_iterations=1,
        # transformers 5.24's name for gradient_checkpointing (which TRL reads; the old names mirror the new ones)
        activation_checkpointing=job["gradient_checkpointing"],
        activation_checkpointing_kwargs={"use_reentrant": False},  # as infgrpo's load_policy
        use_cpu=not cuda,
        bf16=cuda and job["dtype"] == "bfloat16",
        fp16=False,
        shuffle_dataset=False,
        max_steps=job["steps"],
        reward_weights=list(job_rewards(job).values()),
        seed=job["seed"],
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def trl_dataset(job: dict, data: PromptDataModule, items: list[dict]) -> Any:
    """``--format trl``: the job's ``train.jsonl`` as TRL reads a data file (a ``datasets.Dataset``), its rows
    selected in the order infgrpo draws ``items``; a ValueError unless each selected row is its item's row."""
    from datasets import Dataset

    path = job["data_files"]["train"]["path"]
    rows = Dataset.from_json(path)
    if len(rows) != len(data.train_items):
        raise ValueError(f"{path}: {len(rows)} rows, but infgrpo's data module kept {len(data.train_items)}")
    where = {id(it): i for i, it in enumerate(data.train_items)}  # the loader hands out the items themselves
    order = [where[id(it)] for it in items]
    dataset = rows.select(order)
    for i, (row, item) in enumerate(zip(dataset, items, strict=True)):
        if row != item["meta"]:
            raise ValueError(f"row {i} of TRL's dataset is not the row infgrpo draws there: {row} != {item['meta']}")
    return dataset


def train_trl(job: dict) -> dict[str, Any]:
    """Trains the job with TRL's ``GRPOTrainer`` in this process; returns the records of :func:`train_infgrpo`."""
    from datasets import Dataset
    from peft import LoraConfig

    # 1) infgrpo's prompts, in infgrpo's order
    data = job_data(job)
    items = [item for batch in ordered_batches(data, job["steps"]) for item in batch]
    tok = load_tokenizer(job["model"], job["gguf_file"])
    trl_format = is_trl_format(job)
    if trl_format:  # the file itself; every prompt a conversation
        dataset, chat = trl_dataset(job, data, items), bool(tok.chat_template)
    else:
        chat = bool(data.hparams.chat_template and tok.chat_template)  # as infgrpo's encode_prompt decides
        prompts = [[{"role": "user", "content": it["prompt_text"]}] if chat else it["prompt_text"] for it in items]
        dataset = Dataset.from_dict({"prompt": prompts, "infgrpo_index": list(range(len(items)))})
    # 2) the same base weights, the same LoRA, the same reward
    model = load_policy(job["model"], job["dtype"], gguf_file=job["gguf_file"])
    lora = LoraConfig(
        r=job["lora_r"],
        lora_alpha=job["lora_alpha"],
        lora_dropout=0.0,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    records: list[dict] = []
    if trl_format:  # the functions themselves, as a TRL user passes them (TRL's own accuracy_reward among them)
        from infgrpo.rewards.core import resolve_reward

        funcs = [resolve_reward(name) for name in job_rewards(job)]
    else:
        funcs = [trl_reward(job["reward_function"], items, job["group_size"], job["max_new_tokens"], records)]
    clock = StepClock(job)
    with tempfile.TemporaryDirectory(prefix="infgrpo-learn-trl-") as out:
        args = trl_config(job, out)
        trainer = ObservedGRPOTrainer(
            model=model,
            reward_funcs=funcs,
            args=args,
            train_dataset=dataset,
            processing_class=tok,
            peft_config=lora,
            callbacks=[clock, Snapshots(snapshot_steps(job), job["adapter_dir"])],
        )
        initial = adapter_sha(trainer.model)
        with TrainingMemory() as memory:
            trainer.train()
        trainer.save_model(job["adapter_dir"])
    # 3) one record per optimizer step
    group = job["group_size"]
    if trl_format:  # what TRL's own reward function was given and returned
        records = [observed_record(rec, group, job_rewards(job)) for rec in trainer.observed_rewards]
    steps = []
    for i, (rec, ids, seconds) in enumerate(zip(records, trainer.observed_prompt_ids, clock.seconds, strict=True)):
        fn_rewards = rec["reward_fn_mean"]
        steps.append(
            {
                "step": i,
                **step_record(rec["users"], ids[::group], rec["completions"]),
                "seconds": seconds,
                "reward": clock.rewards.get(i, float("nan")),
                "reward_fn_mean": sum(fn_rewards) / len(fn_rewards),
                "rewards": rec.get("rewards") or {job["reward_function"]: sum(fn_rewards) / len(fn_rewards)},
                "rollout_s": trainer.generation_s[i],
                "update_s": seconds - trainer.generation_s[i],
            }
        )
    policy = trainer.model
    matched = {
        "model": job["model"],
        "dtype": str(next(policy.parameters()).dtype).removeprefix("torch."),
        "prompts_per_step": args.generation_batch_size // args.num_generations,
        "group_size": args.num_generations,
        "completions_per_optimizer_step": args.per_device_train_batch_size * args.gradient_accumulation_steps,
        "chat_template": chat,
        "max_new_tokens": args.max_completion_length,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "stop_token_ids": sorted(trainer.eos_token_ids),
        **lora_settings(policy),
        "learning_rate": args.learning_rate,
        "lr_schedule": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
        + (f", warmup {args.warmup_steps}" if args.warmup_steps else ""),
        **optimizer_settings(getattr(trainer.optimizer, "optimizer", trainer.optimizer)),
        "max_grad_norm": args.max_grad_norm,
        "loss_type": args.loss_type,
        "beta": args.beta,
        "scale_rewards": args.scale_rewards,
        "epsilon_low": args.epsilon,
        "epsilon_high": args.epsilon_high if args.epsilon_high is not None else args.epsilon,
        "num_iterations": args.num_iterations,
        "mask_truncated_completions": args.mask_truncated_completions,
        "gradient_checkpointing": bool(policy.get_base_model().is_gradient_checkpointing),
        "steps": trainer.state.global_step,
        "seed": args.seed,
        "torch_threads": torch.get_num_threads(),
    }
    settings = json.loads(json.dumps(args.to_dict(), default=str))  # every field, as plain JSON
    funcs = [f"{fn.__module__}.{fn.__qualname__}" for fn in trainer.reward_funcs]
    settings = {k: v for k, v in settings.items() if k not in ("output_dir", "logging_dir")}
    return {
        "per_step": steps,
        "reward_funcs": funcs,
        **(
            {"conversational_completions": all(r["conversational"] for r in trainer.observed_rewards)}
            if trl_format
            else {}
        ),
        **memory.result(),
        **device_info(),
        "initial_adapter_sha": initial,
        "final_adapter_sha": adapter_sha(policy),
        "matched": matched,
        "settings": settings,
    }
