"""Benchmark: decode steps of each refill policy against the lower bound, and the planner's time.

    python -m benchmarks schedule [--json PATH] [--quick]

1. **Real rollouts through the engine on the tiny default** (8 prompts x G=8, 8 slots, <= 96 new
   tokens, as ``configs/tiny.yaml``): the learned :class:`LengthPredictor` is trained online on
   ``--warmup`` batches, then every policy decodes the next ``--batches`` batches with its
   predictions (identical completions, different order). The oracle rows replay the actual lengths
   through the trace simulator; each engine run is also checked against the simulator.
2. **Trace simulator** (:mod:`infgrpo.sampler.schedule.simulate`, no model), for scale: distributions
   uniform / long-tailed / bimodal (:mod:`benchmarks.traces`) and ``trace`` (groups resampled
   from part 1's real rollouts), prediction levels from oracle to useless, and sizes from the
   paper's (one prompt, G=32, 8 slots, 1,024 tokens) to 65,536 sequences on 1,024 slots.
   Accounting as the paper's: one decode step per token.
3. **Planner time**: ``plan(...)`` for 4,096 sequences on 64 slots, and the fptas at the paper's size.

Every row reports decode steps / lower bound, ``max(max_i L_i, ceil(sum_i L_i / slots))``. Part 1 runs
on 2 threads unless ``--threads`` says otherwise (as the recorded figures were).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

import torch

from benchmarks.harness import Benchmark
from benchmarks.table import Column, cell, markdown_table
from benchmarks.traces import DISTRIBUTIONS, NOISE_LEVELS, noisy_predictions, synthetic_lengths
from infgrpo.runtime.threads import adapt_threads
from infgrpo.sampler.schedule.planner import plan
from infgrpo.sampler.schedule.schedule_metrics import lower_bound_steps, prediction_errors
from infgrpo.sampler.schedule.simulate import naive_micro_group_steps, simulate

POLICIES = ("fifo", "sjf", "lpt", "planned")
SIZES = (  # (prompts, G, slots, max_new_tokens)
    (1, 32, 8, 1024),
    (8, 32, 16, 1024),
    (64, 64, 256, 1024),
    (512, 128, 1024, 1024),
)


# -- part 1: the tiny default, real rollouts --------------------------------------------------
def tiny_rollouts(warmup: int, batches: int, seed: int = 0) -> dict:
    """Engine runs of every policy on the tiny model with the online-learned predictor."""
    from infgrpo.data import PromptDataModule
    from infgrpo.policy.load import load_policy, load_tokenizer
    from infgrpo.sampler import SamplerConfig
    from infgrpo.sampler.engine.engine import Engine
    from infgrpo.sampler.engine.feed import FixedBatch
    from infgrpo.sampler.schedule.length_predictor import LengthPredictor, prompt_features, prompt_key

    B, G, S, T = 8, 8, 8, 96
    tok = load_tokenizer("tiny")
    model = load_policy("tiny").eval()
    adapt_threads(model, rows=S)  # the engine itself does not adapt: --threads N sets N, 0 decides here once
    data = PromptDataModule(path="tiny", tokenizer="tiny", eval_split=None)
    data.setup("fit")
    order = torch.randperm(len(data.train_items), generator=torch.Generator().manual_seed(seed)).tolist()
    predictor = LengthPredictor("learned", max_length=T)
    stop = [tok.eos_token_id]
    rows: dict[str, list[float]] = {p: [] for p in (*POLICIES, "naive", "oracle-lpt", "oracle-planned")}
    errors, groups, predict_s, decode_s = [], [], 0.0, 0.0
    for k in range(warmup + batches):
        prompts = [data.train_items[i]["prompt_ids"] for i in order[k * B : (k + 1) * B]]
        start = time.perf_counter()
        keys = [prompt_key(p) for p in prompts]
        feats = prompt_features(model, prompts)
        preds = predictor.predict(keys, feats)
        predict_s += time.perf_counter() - start if k >= warmup else 0.0
        policies = POLICIES if k >= warmup else ("fifo",)
        for policy in policies:
            cfg = SamplerConfig(num_slots=S, max_new_tokens=T, temperature=1.0, refill=policy)
            engine = Engine(model, cfg, stop_ids=stop, pad_id=tok.pad_token_id)
            start = time.perf_counter()
            feed = FixedBatch(prompts, G, seed=1000 + k, predicted_lengths=preds)
            st = engine.run(feed)
            seqs = feed.initial()
            decode_s += time.perf_counter() - start if policy == "fifo" and k >= warmup else 0.0
            lengths = [len(s) for s in seqs]
            per_seq = [preds[i // G] for i in range(len(seqs))]
            sim = simulate(lengths, per_seq, S, policy, group_size=G)
            assert sim.decode_steps == st.decode_steps, f"simulator disagrees with the engine ({policy})"
            bound = lower_bound_steps(sim.durations, S)
            if k >= warmup:
                rows[policy].append(st.decode_steps / bound)
        if k >= warmup:
            rows["naive"].append(naive_micro_group_steps(lengths, G, S, first_token_free=True) / bound)
            for p in ("lpt", "planned"):
                rows[f"oracle-{p}"].append(simulate(lengths, lengths, S, p, group_size=G).decode_steps / bound)
            errors.append(prediction_errors(per_seq, lengths))
        predictor.update(keys, feats, [lengths[i : i + G] for i in range(0, len(lengths), G)])
        groups += [lengths[i : i + G] for i in range(0, len(lengths), G)]
    mean_err = {k: statistics.mean(e[k] for e in errors) for k in errors[0]}
    return {
        "setup": f"tiny default: {B} prompts x G={G}, {S} slots, <= {T} new tokens, temperature 1",
        "warmup_batches": warmup,
        "batches": batches,
        "steps_over_bound": {p: statistics.mean(v) for p, v in rows.items()},
        "steps_over_bound_max": {p: max(v) for p, v in rows.items()},
        "prediction": mean_err,
        "predict_time_over_decode": predict_s / decode_s if decode_s else 0.0,
        "groups": groups,
    }


# -- part 2: the trace simulator --------------------------------------------------------------
def trace_lengths(groups: list[list[int]], num_prompts: int, group_size: int, seed: int) -> list[int]:
    """Resamples whole real groups (and samples within them) to ``num_prompts`` x ``group_size``."""
    rng = random.Random(seed)
    out = []
    for _ in range(num_prompts):
        g = rng.choice(groups)
        out += [rng.choice(g) for _ in range(group_size)]
    return out


def simulate_grid(groups: list[list[int]], seeds: int, quick: bool) -> list[dict]:
    """Part 2: decode steps / lower bound of naive micro-groups and every policy, in the trace simulator.

    One row per length distribution (``trace`` resamples ``groups``), size and prediction noise level, the
    mean over ``seeds`` instances (one above 4,096 sequences), with the ``planned`` simulation's time in
    ms. One step per token, as the paper counts; each row is also printed as JSON to stderr.
    """
    rows = []
    sizes = SIZES[:2] if quick else SIZES
    for dist in (*DISTRIBUTIONS, "trace"):
        for P, G, S, T in sizes:
            n_seeds = seeds if P * G <= 4096 else 1
            for level in NOISE_LEVELS:
                acc: dict[str, list[float]] = {}
                plan_ms = []
                for seed in range(n_seeds):
                    if dist == "trace":
                        lengths = trace_lengths(groups, P, G, seed)
                    else:
                        lengths = synthetic_lengths(dist, P, G, T, seed)
                    preds = noisy_predictions(lengths, G, level, seed)
                    bound = lower_bound_steps(lengths, S)
                    acc.setdefault("naive", []).append(naive_micro_group_steps(lengths, G, S) / bound)
                    for policy in POLICIES:
                        start = time.perf_counter()
                        res = simulate(lengths, preds, S, policy, group_size=G, first_token_free=False)
                        if policy == "planned":
                            plan_ms.append(1000 * (time.perf_counter() - start))
                        acc.setdefault(policy, []).append(res.decode_steps / bound)
                row = {"dist": dist, "prompts": P, "G": G, "slots": S, "max_new_tokens": T if dist != "trace" else 96}
                row.update(level=level, seeds=n_seeds, **{k: statistics.mean(v) for k, v in acc.items()})
                row["planned_sim_ms"] = statistics.mean(plan_ms)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


# -- part 3: planner time ----------------------------------------------------------------------
def planner_times(repeats: int = 5) -> list[dict]:
    """Part 3: median milliseconds of ``plan`` over ``repeats`` runs, for a few sizes and methods.

    Long-tailed lengths; each row also gives the method used, makespan / lower bound and its guarantee.
    """
    out = []
    for n, m, method in (
        (4096, 64, "auto"),
        (4096, 64, "lpt"),
        (32, 8, "fptas"),
        (256, 16, "auto"),
        (65536, 1024, "auto"),
    ):
        lengths = synthetic_lengths("long-tailed", max(n // 32, 1), min(n, 32), 1024, 0)[:n]
        times, p = [], None
        for _ in range(repeats):
            start = time.perf_counter()
            p = plan(lengths, m, method, epsilon=0.1)
            times.append(1000 * (time.perf_counter() - start))
        out.append(
            dict(
                sequences=n,
                slots=m,
                method=method,
                used=p.method,
                ms_median=statistics.median(times),
                makespan_over_bound=p.makespan / p.lower_bound,
                guarantee=p.guarantee,
            )
        )
    return out


# -- tables ------------------------------------------------------------------------------------
def tiny_table(tiny: dict) -> str:
    """Part 1: steps / lower bound of each policy (mean and worst batch), and the learned predictor's errors."""
    rows = [
        {"policy": p, "mean": v, "worst": tiny["steps_over_bound_max"][p]} for p, v in tiny["steps_over_bound"].items()
    ]
    columns: list[Column] = [
        ("policy", cell("policy")),
        ("decode steps / lower bound (mean)", cell("mean", ".3f")),
        ("worst batch", cell("worst", ".3f")),
    ]
    pe = tiny["prediction"]
    return (
        f"## Real rollouts: {tiny['setup']}; {tiny['batches']} batches after {tiny['warmup_batches']} of warm-up\n"
        f"{markdown_table(columns, rows)}\n\n"
        f"learned predictor: MAE {pe['length_mae']:.1f} tokens, Spearman {pe['length_spearman']:.2f}, "
        f"within +-20%: {pe['length_within_20pct']:.0%}; predict time / decode time "
        f"{tiny['predict_time_over_decode']:.3f}"
    )


def grid_table(rows: list[dict]) -> str:
    """Part 2: steps / lower bound of naive micro-groups and each policy, and the best one's gain over naive."""
    columns: list[Column] = [
        ("lengths", cell("dist")),
        ("prompts x G", lambda r: f"{r['prompts']} x {r['G']}"),
        ("slots", cell("slots")),
        ("prediction", cell("level")),
        *((p, cell(p, ".3f")) for p in ("naive", *POLICIES)),
        ("best vs naive", lambda r: f"{1 - min(r[p] for p in POLICIES) / r['naive']:+.1%}"),
    ]
    return "## Trace simulator: decode steps / lower bound\n" + markdown_table(columns, rows)


def planner_table(rows: list[dict]) -> str:
    """Part 3: the planner's median time, the method whose bound applies, makespan / lower bound, guarantee."""
    columns: list[Column] = [
        ("sequences", cell("sequences")),
        ("slots", cell("slots")),
        ("method", cell("method")),
        ("used", cell("used")),
        ("median ms", cell("ms_median", ".2f")),
        ("makespan / bound", cell("makespan_over_bound", ".4f")),
        ("guarantee", cell("guarantee", ".3f")),
    ]
    return "## Planner time\n" + markdown_table(columns, rows)


def tables(result: dict) -> str:
    """The three parts' tables."""
    return "\n\n".join([tiny_table(result["tiny"]), grid_table(result["grid"]), planner_table(result["planner"])])


def run(args: argparse.Namespace) -> dict:
    """Runs the three parts (see the module docstring): ``{"tiny": ..., "grid": [...], "planner": [...]}``."""
    tiny = tiny_rollouts(args.warmup, args.batches)
    grid = simulate_grid(tiny.pop("groups"), args.seeds, args.quick)
    return {"tiny": tiny, "grid": grid, "planner": planner_times()}


def add_args(ap: argparse.ArgumentParser) -> None:
    """The schedule benchmark's own arguments."""
    ap.add_argument("--warmup", type=int, default=20, help="tiny batches that only train the predictor")
    ap.add_argument("--batches", type=int, default=20, help="tiny batches measured per policy")
    ap.add_argument("--seeds", type=int, default=5, help="instances averaged per small configuration")
    ap.add_argument("--quick", action="store_true", help="small sizes only (a smoke run)")


BENCH = Benchmark("schedule", __doc__, add_args, run, tables, threads=2)

main = BENCH.main  # main(argv=None) -> the result: what --json writes

if __name__ == "__main__":
    main()
