"""Benchmark: held-out accuracy of the tiny default before and after GRPO, and the run's wall time.

    python -m benchmarks train-tiny [--config configs/tiny.yaml] [--json PATH] [overrides ...]

Evaluates the shipped model greedily on the held-out split, runs ``python -m infgrpo.fit`` with the
config (extra arguments are passed through as LightningCLI overrides), then evaluates the trained
policy on the same prompts. Threads are the config's (``threads: auto`` in ``configs/tiny.yaml``);
pass ``--model.threads N`` to fix them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness import Benchmark
from benchmarks.results import logged_steps
from benchmarks.table import Column, cell, markdown_table
from infgrpo.data import PromptDataModule
from infgrpo.evaluation import evaluate
from infgrpo.fit import main as fit_main
from infgrpo.policy.load import load_policy, load_tokenizer


def read_train_curves(root: Path) -> dict[str, float]:
    """Means of the per-step training metrics in the run's CSV log (reward, decode steps, ...)."""
    rows = logged_steps(root)

    def col(name: str) -> list[float]:
        return [float(r[name]) for r in rows if r.get(name)]

    reward = col("train/reward")
    return {
        "logged_steps": len(rows),
        "reward_first10": statistics.mean(reward[:10]) if reward else float("nan"),
        "reward_last10": statistics.mean(reward[-10:]) if reward else float("nan"),
        "decode_steps_mean": statistics.mean(col("train/rollout/decode_steps") or [float("nan")]),
        "steps_over_lower_bound_mean": statistics.mean(col("train/rollout/steps_over_lower_bound") or [float("nan")]),
        "entropy_mean": statistics.mean(col("train/entropy") or [float("nan")]),
        "logprob_mismatch_mean": statistics.mean(col("train/rollout/logprob_mismatch_mean") or [float("nan")]),
        "logprob_mismatch_max": max(col("train/rollout/logprob_mismatch_max") or [float("nan")]),
    }


def run(args: argparse.Namespace) -> dict:
    """Evaluates the tiny model, trains it with ``infgrpo.fit`` (``args.extra`` as overrides), evaluates it again."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    data = PromptDataModule(path="tiny", tokenizer="tiny", eval_size=args.eval_size)
    data.setup("fit")
    tok = load_tokenizer("tiny")
    settings = dict(rewards={"synthetic": 1.0}, accuracy="synthetic", max_new_tokens=96)
    before = evaluate(load_policy("tiny").eval(), tok, data.eval_items, **settings)

    with tempfile.TemporaryDirectory() as root:
        start = time.perf_counter()
        cli = fit_main(["--config", args.config, "--trainer.default_root_dir", root, *args.extra])
        wall = time.perf_counter() - start
        curves = read_train_curves(Path(root))
    after = evaluate(cli.model.policy.eval(), tok, data.eval_items, **settings)
    return {
        "config": args.config,
        "overrides": args.extra,
        "max_steps": cli.trainer.max_steps,
        "eval_prompts": len(data.eval_items),
        "accuracy_before": before["accuracy"],
        "accuracy_after": after["accuracy"],
        "accuracy_gain_points": 100 * (after["accuracy"] - before["accuracy"]),
        "mean_length_before": before["completion_length"],
        "mean_length_after": after["completion_length"],
        "fit_wall_time_s": wall,
        **curves,
        "cpu_threads": os.cpu_count(),
    }


def tables(result: dict) -> str:
    """Held-out accuracy and mean length before and after, the training reward and decode steps, the wall time.

    Figures a run did not record (a run stopped early) show as —.
    """

    def get(key: str | None, spec: str) -> str:
        return format(result[key], spec) if key in result else ("—" if key else "")

    metrics = [
        (f"held-out accuracy (greedy, {get('eval_prompts', '')} prompts)", "accuracy_before", "accuracy_after", ".3f"),
        ("mean completion length", "mean_length_before", "mean_length_after", ".1f"),
        ("train reward (mean of first / last 10 logged steps)", "reward_first10", "reward_last10", ".3f"),
        ("decode steps per rollout (mean)", None, "decode_steps_mean", ".1f"),
        ("decode steps / lower bound (mean)", None, "steps_over_lower_bound_mean", ".3f"),
        ("token entropy (mean over steps)", None, "entropy_mean", ".3f"),
        ("rollout vs training log-prob |difference| (mean; max over steps)", None, "logprob_mismatch", ""),
    ]
    if "logprob_mismatch_mean" in result:
        mean, top = result["logprob_mismatch_mean"], result["logprob_mismatch_max"]
        result = {**result, "logprob_mismatch": f"{mean:.2e}; {top:.2e}"}
    rows = [{"metric": name, "before": get(b, spec), "after": get(a, spec)} for name, b, a, spec in metrics]
    columns: list[Column] = [("metric", cell("metric")), ("before", cell("before")), ("after", cell("after"))]
    wall = f"fit wall time: {get('fit_wall_time_s', '.0f')} s for {get('max_steps', '')} steps"
    return f"{markdown_table(columns, rows)}\n\n{wall}"


def add_args(ap: argparse.ArgumentParser) -> None:
    """The train-tiny benchmark's own arguments (the ones it does not know go to the fit CLI)."""
    ap.add_argument("--config", default="configs/tiny.yaml")
    ap.add_argument("--eval-size", type=int, default=500)


BENCH = Benchmark("train-tiny", __doc__, add_args, run, tables, threads=None, extra_args=True)

main = BENCH.main  # main(argv=None) -> the result: what --json writes

if __name__ == "__main__":
    main()
