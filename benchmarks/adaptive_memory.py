"""Peak memory of a rollout whose groups grow to hundreds of samples a prompt, against the same rollout at G.

    python -m benchmarks adaptive-memory --model smollm2 --caps 8 64 256 --json benchmarks/adaptive_memory_smollm2.json
    python -m benchmarks adaptive-memory --model tiny --caps 4 16 --prompts 2 --group-size 4 --num-slots 4  # seconds

The paper's claim, where adaptive groups lean on it: the slot pool bounds a rollout's memory, so a prompt can get
256 samples at the memory of 8. Each cap is one fresh process (:func:`~benchmarks.harness.spawn`): the policy
and the task's prompts loaded, then one rollout of ``--prompts`` prompts x ``--group-size`` on ``--num-slots``
slots with adaptive groups at ``max_samples_per_prompt`` = the cap and a budget of prompts x cap samples
(a cap equal to the group size is the fixed-G rollout, nothing extended). The prompts are the task's hardest,
so their groups stall and grow: for ``chain_sum``, negative differences (the untrained SmolLM2 answers about
0.5% of their samples right); for the tiny task, the first prompts. Measured around the rollout alone (the
model already loaded): peak RSS (and its rise above the level before the rollout), CUDA's allocator peak
when there is one, the samples a prompt got (mean, max), decoded tokens and decode steps.
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace
from typing import Any

import torch

from benchmarks.dynamic import JOBS, setup
from benchmarks.harness import Benchmark, spawn_all
from benchmarks.memory import PeakRSS, mib
from benchmarks.table import markdown_table, ratio


def add_args(ap: argparse.ArgumentParser) -> None:
    """The job (the SmolLM2 CPU recipe's rollout by default) and the caps compared."""
    ap.add_argument("--model", default="smollm2", choices=sorted(JOBS), help="the recipe's model and task")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--num-slots", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--caps", type=int, nargs="+", default=[8, 64, 256], help="max_samples_per_prompt of each run")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run")


def run(args: argparse.Namespace) -> dict:
    """One fresh process per cap."""
    if min(args.caps) < args.group_size:
        raise ValueError(f"--caps {args.caps}: every cap must be >= --group-size={args.group_size}")
    job = {k: v for k, v in vars(args).items() if k not in ("caps", "timeout", "json", "one", "command")}
    configs = [{**job, "cap": cap} for cap in args.caps]
    return {"job": job, "rows": spawn_all("adaptive-memory", configs, timeout=args.timeout)}


def hardest(items: list[dict], model: str, n: int) -> list[dict]:
    """The ``n`` prompts whose groups stall most: chain_sum's negative differences, else the first ones."""
    if model == "smollm2":
        from benchmarks.learn_job import answer_kind

        items = [it for it in items if answer_kind(it["meta"]) == "neg"]
    return items[:n]


def run_one(cfg: dict) -> dict:
    """One rollout at ``cfg['cap']`` samples a prompt at most, measured in this process."""
    from infgrpo import MicroGroupSampler, SamplerConfig
    from infgrpo.scoring import Scorer
    from infgrpo.training.adaptive import AdaptiveGroupsConfig
    from infgrpo.training.judged_rollout import GroupJudge

    args = SimpleNamespace(model=cfg["model"], prompts=cfg["prompts"])
    model, tok, items, reward = setup(args)
    g, b, cap = cfg["group_size"], cfg["prompts"], cfg["cap"]
    chosen = hardest(items, cfg["model"], b)
    scorer = Scorer(tok, {reward: 1.0}, "raise", cfg["max_new_tokens"])
    judge = GroupJudge(scorer, "reward_spread", chosen)
    grow = None
    if cap > g:
        grow = AdaptiveGroupsConfig(True, cap, b * cap, "value").spec(judge, g, b)
    sampler = MicroGroupSampler(
        model, tok, SamplerConfig(num_slots=cfg["num_slots"], max_new_tokens=cfg["max_new_tokens"])
    )
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with PeakRSS() as rss:
        out = sampler.sample([it["prompt_ids"] for it in chosen], g, seed=0, adaptive=grow)
    wall = time.perf_counter() - start
    st, grew = out.stats, out.adaptive
    result = {
        **cfg,
        "rss_peak_bytes": rss.peak,
        "rss_rise_bytes": rss.peak - rss.base,
        "samples_per_prompt_mean": grew.samples_per_prompt_mean if grew is not None else g,
        "samples_per_prompt_max": grew.samples_per_prompt_max if grew is not None else g,
        "groups_rescued": grew.groups_rescued if grew is not None else 0,
        "generated_tokens": st["generated_tokens"],
        "decode_steps": st["decode_steps"],
        "wall_s": wall,
    }
    if torch.cuda.is_available():
        result["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
    return result


def tables(result: dict) -> str:
    """One row per cap, and the peak RSS of each against the fixed-G run (the smallest cap)."""
    rows = result["rows"]
    base = next((r for r in rows if "skipped" not in r and r["cap"] == result["job"]["group_size"]), None)

    def versus(r: dict) -> str:
        return ratio(r["rss_peak_bytes"], base["rss_peak_bytes"]) if base else "—"

    columns: list[Any] = [
        ("max_samples_per_prompt", lambda r: r["cap"]),
        ("samples a prompt (mean, max)", lambda r: f"{r['samples_per_prompt_mean']:.1f}, "
                                                   f"{r['samples_per_prompt_max']}"),
        ("rescued", lambda r: r["groups_rescued"]), ("decoded tokens", lambda r: r["generated_tokens"]),
        ("decode steps", lambda r: r["decode_steps"]), ("peak RSS MiB", lambda r: mib(r["rss_peak_bytes"])),
        ("RSS rise MiB", lambda r: mib(r["rss_rise_bytes"])), ("peak RSS vs G", versus),
    ]  # fmt: skip
    if any("cuda_max_allocated_bytes" in r for r in rows):
        columns.append(("CUDA max allocated MiB", lambda r: mib(r.get("cuda_max_allocated_bytes", 0))))
    return markdown_table(columns, rows, keys=1)


BENCH = Benchmark("adaptive-memory", __doc__, add_args, run, tables, run_one=run_one, threads=1)


def main(argv: list[str] | None = None) -> dict:
    """``python -m benchmarks adaptive-memory``."""
    return BENCH.main(argv)
