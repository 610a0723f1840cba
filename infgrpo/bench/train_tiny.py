"""Benchmark: held-out accuracy of the tiny default before and after GRPO, and the run's wall time.

    python -m infgrpo.bench train-tiny [--config configs/tiny.yaml] [--json PATH] [overrides ...]

Evaluates the shipped model greedily on the held-out split, runs ``python -m infgrpo.fit`` with the
config (extra arguments are passed through as LightningCLI overrides), then evaluates the trained
policy on the same prompts.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile
import time
from pathlib import Path

from infgrpo.bench.results import write_json
from infgrpo.data import PromptDataModule
from infgrpo.evaluation import evaluate
from infgrpo.fit import main as fit_main
from infgrpo.models import load_policy, load_tokenizer


def read_train_curves(root: Path) -> dict[str, float]:
    """Means of the per-step training metrics in the run's CSV log (reward, decode steps, ...)."""
    rows = [r for f in sorted(root.rglob("metrics.csv")) for r in csv.DictReader(f.open())]
    rows = [r for r in rows if r.get("train/reward")]

    def col(name: str) -> list[float]:
        return [float(r[name]) for r in rows if r.get(name)]

    reward = col("train/reward")
    return {
        "logged_steps": len(rows),
        "reward_first10": statistics.mean(reward[:10]) if reward else float("nan"),
        "reward_last10": statistics.mean(reward[-10:]) if reward else float("nan"),
        "decode_steps_mean": statistics.mean(col("train/rollout/decode_steps") or [float("nan")]),
        "steps_over_lower_bound_mean": statistics.mean(col("train/rollout/steps_over_lower_bound") or [float("nan")]),
    }


def main(argv: list[str] | None = None) -> dict:
    """Evaluates the tiny model, trains it with ``infgrpo.fit``, evaluates it again; returns the results.

    Arguments it does not know go to the fit CLI as overrides. Prints held-out accuracy and mean
    completion length before and after, the training reward and decode steps from the CSV log, and the
    fit's wall time; writes ``--json``.
    """
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--config", default="configs/tiny.yaml")
    ap.add_argument("--eval-size", type=int, default=500)
    ap.add_argument("--json", default=None, help="write the results as JSON here")
    args, overrides = ap.parse_known_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    data = PromptDataModule(path="tiny", tokenizer="tiny", eval_size=args.eval_size)
    data.setup("fit")
    tok = load_tokenizer("tiny")
    settings = dict(rewards={"synthetic": 1.0}, accuracy_reward="synthetic", max_new_tokens=96)
    before = evaluate(load_policy("tiny").eval(), tok, data.eval_items, **settings)

    with tempfile.TemporaryDirectory() as root:
        start = time.perf_counter()
        cli = fit_main(["--config", args.config, "--trainer.default_root_dir", root, *overrides])
        wall = time.perf_counter() - start
        curves = read_train_curves(Path(root))
    after = evaluate(cli.model.policy.eval(), tok, data.eval_items, **settings)
    result = {
        "benchmark": "train-tiny",
        "config": args.config,
        "overrides": overrides,
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
    print("\n| metric | before | after |\n|---|---|---|")
    print(
        f"| held-out accuracy (greedy, {len(data.eval_items)} prompts) | {before['accuracy']:.3f} "
        f"| {after['accuracy']:.3f} |"
    )
    print(f"| mean completion length | {before['completion_length']:.1f} | {after['completion_length']:.1f} |")
    print(
        f"| train reward (mean of first / last 10 logged steps) | {curves['reward_first10']:.3f} "
        f"| {curves['reward_last10']:.3f} |\n"
        f"| decode steps per rollout (mean) | | {curves['decode_steps_mean']:.1f} |\n"
        f"| decode steps / lower bound (mean) | | {curves['steps_over_lower_bound_mean']:.3f} |"
    )
    print(f"\nfit wall time: {wall:.0f} s for {cli.trainer.max_steps} steps")
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
