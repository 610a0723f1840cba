"""Vision-language GRPO's cost: infgrpo beside TRL 1.16's ``GRPOTrainer`` on the same tiny VLM, counted and measured.

    python -m benchmarks vlm --json benchmarks/vlm_tiny.json
    python -m benchmarks vlm --steps 2 --repeats 1 --prompts 2 --group-size 4 --memory-groups 2 4   # the wiring

The model is the shipped tiny Qwen2.5-VL (``tiny-vl``, ``--model``) on the shapes task's rows in TRL's format
(``infgrpo/assets/tiny-shapes``, ``--data``). Each configuration runs in a fresh process (``--threads``, default 1).

1. **trl** (:mod:`benchmarks.vlm_trl` and :mod:`benchmarks.vlm_infgrpo`): ``--steps`` GRPO steps of ``--prompts``
   prompts x ``--group-size`` by TRL 1.16's ``GRPOTrainer`` (the processor from
   :func:`infgrpo.vision.processor.load_processor` as ``processing_class``) and by infgrpo's ``GRPOModule`` on a
   Lightning ``Trainer``: the same rows in the same order, G, max_new_tokens, LoRA (r, alpha, the language model's
   linear layers), lr, loss, steps and seed; one process a run, the two trainers alternating, ``--repeats`` runs
   each. Measured: seconds per step (the median of a run's steps after its first, which pays for lazy
   initializations; then the median over runs) and peak memory (peak RSS of the process during training and its
   rise; on CUDA ``torch.cuda.max_memory_allocated``), as ratios infgrpo / TRL. Counted, whatever the machine
   (:class:`benchmarks.vlm_job.Counts` hooks the same modules on both): images through the vision tower a step, in
   the rollout and in the update (TRL: prompts x G in each forward pass; infgrpo: the step's images once, in the
   rollout, whose features the update reuses while the tower is frozen), and the prompt positions prefilled a group
   (every forward of the language model wider than one position during the rollout, rows x width).
2. **memory** (:mod:`benchmarks.vlm_memory`): peak RSS of one rollout (the sampler on ``--memory-prompts`` image
   prompts) at each G of ``--memory-groups`` on ``--slots`` slots, a fresh process each: the target is the largest G
   within 5% of the smallest.

``--parts`` picks the parts (default: both).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from benchmarks import vlm_memory
from benchmarks.harness import Benchmark, spawn_all
from benchmarks.memory import mib
from benchmarks.table import markdown_table, ratio

PARTS = ("trl", "memory")
TRAINERS = ("infgrpo", "trl")
JOB_KEYS = ("model", "data", "prompts", "group_size", "max_new_tokens", "lora_r", "lora_alpha", "lr", "steps", "seed",
            "slots", "threads")  # fmt: skip


def add_args(ap: argparse.ArgumentParser) -> None:
    """The job (``configs/vlm-tiny.yaml``'s settings at 6733c35), the repeats and the memory part's group sizes."""
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to measure")
    ap.add_argument("--model", default="tiny-vl", help="an image-text-to-text model (default: the shipped tiny one)")
    ap.add_argument("--data", default="infgrpo/assets/tiny-shapes", help="rows in TRL's format with an image column")
    ap.add_argument("--prompts", type=int, default=8, help="prompts a step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--lora-alpha", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--steps", type=int, default=4, help="trl: steps a run (the first is left out of s / step)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--slots", type=int, default=16, help="infgrpo's num_slots (both parts)")
    ap.add_argument("--repeats", type=int, default=3, help="trl: runs of each trainer, alternating")
    ap.add_argument("--memory-groups", type=int, nargs="+", default=[8, 64], help="memory: the group sizes G")
    ap.add_argument("--memory-prompts", type=int, default=4, help="memory: image prompts a rollout")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds each configuration may take")


def run(args: argparse.Namespace) -> dict:
    """The parts asked for, each configuration in its own process: the trainers alternating, then one per G."""
    job = {k: getattr(args, k) for k in JOB_KEYS}
    configs: list[dict] = []
    if "trl" in args.parts:
        for r in range(args.repeats):
            for trainer in TRAINERS if r % 2 == 0 else TRAINERS[::-1]:
                configs.append({**job, "part": "trl", "trainer": trainer, "repeat": r})
    if "memory" in args.parts:
        configs += [{**job, "part": "memory", "group_size": g, "prompts": args.memory_prompts}
                    for g in args.memory_groups]  # fmt: skip
    rows = spawn_all("vlm", configs, timeout=args.timeout)
    out: dict[str, Any] = {"job": job}
    if "trl" in args.parts:
        out["trl"] = [r for r in rows if r["part"] == "trl"]
    if "memory" in args.parts:
        out["memory"] = [r for r in rows if r["part"] == "memory"]
    return out


def run_one(cfg: dict) -> dict:
    """One configuration (in the child): a trainer's run, or a rollout at one G."""
    if cfg["part"] == "memory":
        return vlm_memory.run(cfg)
    if cfg["trainer"] == "trl":
        from benchmarks.vlm_trl import run_trl

        return {**cfg, **run_trl(cfg)}
    from benchmarks.vlm_infgrpo import run_infgrpo

    return {**cfg, **run_infgrpo(cfg)}


def step_seconds(row: dict) -> float:
    """A run's seconds per step: the median of its steps after the first (the first, alone, when it ran one)."""
    seconds = row["seconds"]
    return statistics.median(seconds[1:] or seconds)


def per_step(row: dict, phase: str, key: str) -> float:
    """A count of ``phase`` (``rollout``, ``update``) divided by the run's steps."""
    return row["counts"].get(phase, {}).get(key, 0) / len(row["seconds"])


def per_group(row: dict, value: float) -> float:
    """``value`` (summed over the run) divided by the groups the run decoded (steps x prompts)."""
    return value / (len(row["seconds"]) * row["prompts"])


def rollout_positions(row: dict) -> int:
    """Positions through the language model in forwards wider than one position during the run's rollouts: the
    prompts' prefills (rows x width, padding included), and on infgrpo's side the length predictor's prompt forward."""
    return row["counts"].get("rollout", {}).get("wide_positions", 0)


FIGURES: list[tuple[str, Any, str]] = [
    ("seconds / step", step_seconds, ".2f"),
    ("seconds in garbage collection / step", lambda r: r["gc_s"] / len(r["seconds"]), ".2f"),
    ("full garbage collections / step", lambda r: r["gc_full_collections"] / len(r["seconds"]), ".1f"),
    ("peak RSS MiB", lambda r: r["rss_peak_bytes"], "mib"),
    ("RSS rise MiB", lambda r: r["rss_rise_bytes"], "mib"),
    ("CUDA max allocated MiB", lambda r: r.get("cuda_max_allocated_bytes"), "mib"),
    ("images through the tower / step, rollout", lambda r: per_step(r, "rollout", "images"), ".0f"),
    ("images through the tower / step, update", lambda r: per_step(r, "update", "images"), ".0f"),
    ("tower calls / step", lambda r: per_step(r, "rollout", "tower_calls") + per_step(r, "update", "tower_calls"),
     ".1f"),
    ("prompt positions through the LM in the rollout / group", lambda r: per_group(r, rollout_positions(r)), ".1f"),
    ("  of which the engine's prefill (each prompt once)", lambda r: per_group(r, sum(r["engine_prefill_tokens"]))
     if "engine_prefill_tokens" in r else None, ".1f"),
    ("prompt tokens / group", lambda r: per_group(r, r["prompt_tokens"]), ".1f"),
]  # fmt: skip
"""(name, a run's figure, its format) of the summary: the median over a trainer's runs of each."""


def fmt(value: float | None, spec: str) -> str:
    """``value`` as ``spec`` (``mib``: bytes in MiB); '-' for None (a figure this trainer does not have)."""
    if value is None:
        return "-"
    return mib(value) if spec == "mib" else format(value, spec)


def trl_tables(rows: list[dict]) -> str:
    """Each run, then each figure's median over runs per trainer and the ratio infgrpo / TRL."""
    run_cols = [
        ("trainer", lambda r: r["trainer"]), ("run", lambda r: r["repeat"]),
        ("s / step (after the first)", lambda r: f"{step_seconds(r):.2f}"),
        ("first step s", lambda r: f"{r['seconds'][0]:.2f}"), ("peak RSS MiB", lambda r: mib(r["rss_peak_bytes"])),
        ("RSS rise MiB", lambda r: mib(r["rss_rise_bytes"])),
        ("images / step (rollout + update)", lambda r: f"{per_step(r, 'rollout', 'images'):.0f} + "
                                                       f"{per_step(r, 'update', 'images'):.0f}"),
        ("same prompt ids", lambda r: r.get("same_prompt_ids", "")),
    ]  # fmt: skip
    out = markdown_table(run_cols, rows, keys=2)
    done = {t: [r for r in rows if r["trainer"] == t and "skipped" not in r] for t in TRAINERS}
    if not all(done.values()):
        return out
    summary = []
    for name, figure, spec in FIGURES:
        values = {t: [v for v in (figure(r) for r in done[t]) if v is not None] for t in TRAINERS}
        if not any(values.values()):
            continue
        ours, theirs = (statistics.median(values[t]) if values[t] else None for t in TRAINERS)
        summary.append({"figure": name, "infgrpo": fmt(ours, spec), "trl": fmt(theirs, spec),
                        "ratio": ratio(ours, theirs) if ours is not None else ""})  # fmt: skip
    cols = [("median over runs", lambda r: r["figure"]), ("infgrpo", lambda r: r["infgrpo"]),
            ("TRL 1.16", lambda r: r["trl"]), ("infgrpo / TRL", lambda r: r["ratio"])]  # fmt: skip
    job = done["trl"][0]
    out += "\n\n" + markdown_table(cols, summary)
    out += (
        f"\n\n{job['prompts']} prompts x G={job['group_size']} a step, {len(job['seconds'])} steps a run, "
        f"{len(done['infgrpo'])} + {len(done['trl'])} runs; TRL's expected images a forward pass: prompts x G = "
        f"{job['prompts'] * job['group_size']}"
    )
    return out


def tables(result: dict) -> str:
    """The tables of the parts measured."""
    parts = []
    if "trl" in result:
        parts.append(trl_tables(result["trl"]))
    if "memory" in result:
        parts.append(vlm_memory.table(result["memory"]))
    return "\n\n".join(parts)


BENCH = Benchmark("vlm", __doc__, add_args, run, tables, run_one=run_one, threads=1)


def main(argv: list[str] | None = None) -> dict:
    """``python -m benchmarks vlm``."""
    return BENCH.main(argv)
