"""Benchmark: rollout memory, decode steps and throughput of the engine vs HF ``generate``.

    python -m infgrpo.bench rollout --model tiny --json benchmarks/rollout_tiny.json
    python -m infgrpo.bench rollout --model qwen3-42m --max-new-tokens 128 --json benchmarks/rollout_qwen3.json
    python -m infgrpo.bench rollout --model qwen3-42m --rollout-memory 0.5GB 1GB 4GB --prompts 8 --group-sizes 128

Three decoders on the same model, prompts and seeds: ``hf_full`` (HF generate over the whole
group), ``hf_micro`` (naive micro-groups: HF generate round by round, ``num_slots`` at a time) and
``engine`` (the slot pool with continuous refill). Each configuration runs in a fresh process.
Memory: the CUDA allocator peak on GPU; on CPU the KV bytes held and the process's peak RSS above
its baseline (sampled every 2 ms). The lower bound on decode steps is
``max(max_i L_i, ceil(sum_i L_i / num_slots))`` (first tokens come from the prefill, so the engine's
steps are counted over L_i - 1 there).

With ``--rollout-memory`` budgets, only the engine runs, with ``num_slots: auto`` under each budget:
the table gives the slots chosen, the bytes planned (:mod:`infgrpo.sampler.pool_sizing`) and the
peak memory measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import subprocess
import sys
import threading
import time

import psutil
import torch

from infgrpo.bench.models import bench_setup
from infgrpo.bench.results import write_json
from infgrpo.runtime.threads import set_threads
from infgrpo.sampler import MicroGroupSampler, SamplerConfig


class RSSTimeline:
    """Polls this process's resident memory in a thread, keeping (time, bytes) samples."""

    def __init__(self, interval: float = 0.002) -> None:
        self.proc, self.interval, self.samples = psutil.Process(), interval, []

    def __enter__(self) -> RSSTimeline:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.record(self.proc.memory_info().rss)
            time.sleep(self.interval)

    def record(self, rss: int) -> None:
        """Keeps one sample (the timeline keeps them all, with their time)."""
        self.samples.append((time.perf_counter(), rss))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.record(self.proc.memory_info().rss)

    def rise(self, start: float, end: float) -> tuple[int, int]:
        """(peak within [start, end] minus the level at ``start``, that level) in bytes."""
        before = [r for t, r in self.samples if t <= start]
        inside = [r for t, r in self.samples if start <= t <= end]
        base = before[-1] if before else (inside[0] if inside else 0)
        return max(inside, default=base) - base, base


class PeakRSS(RSSTimeline):
    """Polls this process's resident memory in a thread; ``peak - base`` is the rise during the block.

    Keeps only the peak: a list of samples would itself grow the memory it measures.
    """

    def __enter__(self) -> PeakRSS:
        gc.collect()
        self.base = self.peak = self.proc.memory_info().rss
        return super().__enter__()

    def record(self, rss: int) -> None:
        """Keeps the larger of the peak so far and ``rss``."""
        self.peak = max(self.peak, rss)


def run_one(cfg: dict) -> dict:
    """One configuration, in this process: decode and measure."""
    set_threads(cfg.get("threads") or "auto")  # the sampler applies it (infgrpo.runtime.threads)
    model, prompts, pad_id, stop_ids = bench_setup(cfg["model"], cfg["prompts"], 0, cfg.get("stop_fraction", 0.02))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    budget = cfg.get("rollout_memory")
    sc = SamplerConfig(
        num_slots="auto" if budget else cfg["num_slots"],
        rollout_memory=budget or 0.5,
        max_new_tokens=cfg["max_new_tokens"],
        decoder=cfg["decoder"],
        stop_token_ids=stop_ids[1:],
        temperature=1.0,
        cuda_graphs=cfg.get("cuda_graphs", "auto"),
        decode_attention=cfg.get("decode_attention", "efficient"),
    )
    sampler = MicroGroupSampler(model, stop_ids[0], sc, pad_id=pad_id)
    sampler.sample(prompts[:1], 2, seed=99)  # warm-up: lazy initializations out of the measurement
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base_cuda = torch.cuda.memory_allocated()
    with PeakRSS() as rss:
        out = sampler.sample(prompts, cfg["group_size"], seed=cfg["seed"])
    st = out.stats
    lengths = out.lengths
    first_free = 1 if cfg["decoder"] == "engine" else 0  # the engine's first token comes from prefill
    bound = max(max(lengths) - first_free, math.ceil(sum(n - first_free for n in lengths) / st["num_slots"]))
    result = {
        **cfg,
        "decode_steps": st["decode_steps"],
        "lower_bound_steps": bound,
        "generated_tokens": st["generated_tokens"],
        "tokens_per_s": st["tokens_per_s"],
        "wall_time_s": st["wall_time_s"],
        "kv_bytes_peak": st["kv_bytes_peak"],
        "slot_utilization": st["slot_utilization"],
        "slots_used": st["num_slots"],
        "peak_rss_delta_bytes": rss.peak - rss.base,
        "mean_length": sum(lengths) / len(lengths),
        "ms_per_step": 1000 * st["wall_time_s"] / max(st["decode_steps"], 1),
        "graph_captures": st.get("graph_captures", 0),
        "device": device,
    }
    if device == "cuda":
        result["cuda_peak_bytes"] = torch.cuda.max_memory_allocated() - base_cuda
        result["gpu"] = torch.cuda.get_device_name()
    if budget:
        plan = sampler.sizer.plan
        result.update(auto_slots=plan.num_slots, max_len=plan.max_len, budget_bytes=plan.budget_bytes)
        result.update(planned_bytes=plan.total_bytes, planned_kv_bytes=plan.num_slots * plan.kv_bytes_per_slot)
    return result


def spawn(cfg: dict, timeout: float | None = None, bench: str = "rollout") -> dict:
    """Runs one configuration of benchmark ``bench`` in a fresh Python process; returns its JSON result."""
    cmd = [sys.executable, "-m", "infgrpo.bench", bench, "--one", json.dumps(cfg)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**cfg, "skipped": f"over {timeout} s"}
    if proc.returncode != 0:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or ["?"]
        return {**cfg, "skipped": f"failed: {tail[0][:200]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mib(n: float) -> str:
    """``n`` bytes in MiB, with a thousands separator and one decimal."""
    return f"{n / 2**20:,.1f}"


def table(rows: list[dict]) -> str:
    """The decoder comparison as a Markdown table, one row per configuration.

    Columns: slots, KV bytes held, peak memory (CUDA or RSS rise), decode steps and their lower bound,
    tokens/s and wall time, then ratios to ``hf_micro`` (steps, tokens/s) and ``hf_full`` (memory) of
    the same prompts and G.
    """
    memory = "CUDA peak MiB" if any("cuda_peak_bytes" in r for r in rows) else "RSS rise MiB"
    head = (
        f"| prompts | G | decoder | slots | KV MiB | {memory} | decode steps | lower bound | tokens/s | wall s "
        "| steps vs hf_micro | tok/s vs hf_micro | memory vs hf_full |"
    )
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        if "skipped" in r:
            lines.append(
                f"| {r['prompts']} | {r['group_size']} | {r['decoder']} | | | | skipped: {r['skipped']} | | | | | | |"
            )
            continue
        peers = {
            x["decoder"]: x
            for x in rows
            if "skipped" not in x and x["prompts"] == r["prompts"] and x["group_size"] == r["group_size"]
        }
        mem = r.get("cuda_peak_bytes", r["peak_rss_delta_bytes"])
        micro, full = peers.get("hf_micro"), peers.get("hf_full")
        steps_ratio = f"{r['decode_steps'] / micro['decode_steps']:.2f}" if micro else ""
        tps_ratio = f"{r['tokens_per_s'] / micro['tokens_per_s']:.2f}" if micro else ""
        mem_full = full.get("cuda_peak_bytes", full["peak_rss_delta_bytes"]) if full else 0
        mem_ratio = f"{mem / mem_full:.2f}" if full and mem_full > 0 else ""
        lines.append(
            f"| {r['prompts']} | {r['group_size']} | {r['decoder']} | {r['slots_used']} | {mib(r['kv_bytes_peak'])} "
            f"| {mib(mem)} | {r['decode_steps']} | {r['lower_bound_steps']} | {r['tokens_per_s']:.0f} "
            f"| {r['wall_time_s']:.2f} | {steps_ratio} | {tps_ratio} | {mem_ratio} |"
        )
    return "\n".join(lines)


def auto_table(rows: list[dict]) -> str:
    """The ``--rollout-memory`` table: slots chosen per budget, bytes planned, peak measured."""
    cuda = any("cuda_peak_bytes" in r for r in rows)
    memory = "CUDA peak MiB" if cuda else "RSS rise MiB"
    head = (
        f"| budget | prompts x G | auto slots | slots used | tokens a slot | planned MiB | KV held MiB | {memory} "
        "| measured / planned | decode steps | tokens/s |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['rollout_memory']} | {r['prompts']} x {r['group_size']} | skipped: {r['skipped']} |")
            continue
        mem = r.get("cuda_peak_bytes", r["peak_rss_delta_bytes"])
        lines.append(
            f"| {r['rollout_memory']} | {r['prompts']} x {r['group_size']} | {r['auto_slots']} | {r['slots_used']} "
            f"| {r['max_len']} | {mib(r['planned_bytes'])} | {mib(r['kv_bytes_peak'])} | {mib(mem)} "
            f"| {mem / r['planned_bytes']:.2f} | {r['decode_steps']} | {r['tokens_per_s']:.0f} |"
        )
    return "\n".join(lines)


def config(args: argparse.Namespace, prompts: int, group_size: int, decoder: str, **extra: object) -> dict:
    """One configuration for :func:`spawn`: the command line's settings for (prompts, G, decoder)."""
    return dict(
        model=args.model,
        prompts=prompts,
        group_size=group_size,
        decoder=decoder,
        seed=args.seed,
        num_slots=args.num_slots,
        max_new_tokens=args.max_new_tokens,
        threads=args.threads,
        stop_fraction=args.stop_fraction,
        **extra,
    )


def run_budgets(args: argparse.Namespace) -> list[dict]:
    """``--rollout-memory``: the engine with ``num_slots: auto`` under each budget, each in a fresh process."""
    rows = []
    for prompts in args.prompts:
        for g in args.group_sizes:
            for budget in args.rollout_memory:
                cfg = config(args, prompts, g, "engine", rollout_memory=budget)
                rows.append(spawn(cfg, args.timeout))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(auto_table(rows))
    write_json(args.json, {"command": " ".join(sys.argv), "rows": rows})
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    """Compares the decoders on every (prompts, G), each configuration in a fresh process; returns the rows.

    Prints each row as JSON to stderr and the :func:`table` to stdout, and writes ``--json``. With
    ``--rollout-memory`` it runs :func:`run_budgets` instead; with ``--one`` (used by :func:`spawn`) it
    runs one configuration in this process and prints its JSON.
    """
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="tiny", help="tiny, qwen3-42m or qwen3-1.7b-shape")
    ap.add_argument("--group-sizes", type=int, nargs="+", default=[8, 32, 128, 512])
    ap.add_argument("--prompts", type=int, nargs="+", default=[1, 8], help="prompts per step")
    ap.add_argument("--num-slots", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--decoders", nargs="+", default=["hf_full", "hf_micro", "engine"])
    ap.add_argument(
        "--rollout-memory",
        nargs="+",
        default=None,
        help="budgets such as 0.5GB 1GB 4GB: run the engine with num_slots 'auto' under each (instead of the "
        "decoder comparison) and report the slots chosen, the bytes planned and the peak memory measured",
    )
    ap.add_argument("--max-sequences", type=int, default=4096, help="skip configurations with more sequences")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per configuration before skipping it")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--stop-fraction",
        type=float,
        default=0.02,
        help="random-weight models: share of the vocabulary that stops a completion (mean length ~ 1 / it)",
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = infgrpo's auto)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return []
    if args.rollout_memory:
        return run_budgets(args)
    rows = []
    for prompts in args.prompts:
        for g in args.group_sizes:
            for decoder in args.decoders:
                cfg = config(args, prompts, g, decoder)
                if prompts * g > args.max_sequences:
                    rows.append({**cfg, "skipped": f"{prompts * g} sequences > --max-sequences"})
                    continue
                rows.append(spawn(cfg, args.timeout))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(table(rows))
    write_json(args.json, {"command": " ".join(sys.argv), "rows": rows})
    return rows


if __name__ == "__main__":
    main()
