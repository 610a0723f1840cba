"""Benchmark: rollout memory, decode steps and throughput of the engine vs HF ``generate``.

    python -m benchmarks rollout --model tiny --json benchmarks/rollout_tiny.json
    python -m benchmarks rollout --model qwen3-42m --max-new-tokens 128 --json benchmarks/rollout_qwen3.json
    python -m benchmarks rollout --model qwen3-42m --rollout-memory 0.5GB 1GB 4GB --prompts 8 --group-sizes 128
    python -m benchmarks rollout --model qwen3-42m --decoders engine hf_full hf_cb --prompts 1 --group-sizes 8 32
    python -m benchmarks rollout --model tiny --decoders engine hf_micro --decode-widths pool busy --threads 1

Decoders on the same model, prompts and seeds: ``hf_full`` (HF generate over the whole group),
``hf_micro`` (naive micro-groups: HF generate round by round, ``num_slots`` at a time), ``engine``
(the slot pool with continuous refill), and on request ``hf_cb`` (transformers' continuous batching,
``generate_batch``, ``num_slots`` sequences a forward; its decode steps are its forwards, prefill
included; where it cannot run the model, its row is skipped with the reason). Each configuration
runs in a fresh process.
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
import math
from collections.abc import Callable

import torch

from benchmarks.harness import Benchmark, spawn_all
from benchmarks.memory import PeakRSS, mib
from benchmarks.models import NAMES_HELP, bench_setup
from benchmarks.table import Column, cell, markdown_table, ratio
from infgrpo.registry import choices
from infgrpo.sampler import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.engine.decode_step import DecodeWidth
from infgrpo.sampler.hf.baselines import Decoder
from infgrpo.sampler.hf.hf_continuous import refusal


def run_one(cfg: dict) -> dict:
    """One configuration, in this process (the child of :func:`~benchmarks.harness.spawn`): decode and measure."""
    model, prompts, pad_id, stop_ids = bench_setup(cfg["model"], cfg["prompts"], 0, cfg.get("stop_fraction", 0.02))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    if cfg["decoder"] == "hf_cb" and (reason := refusal(model)) is not None:
        return {**cfg, "skipped": f"hf_cb cannot run: {reason}"}
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
        decode_width=cfg.get("decode_width", "auto"),
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
        "graph_fallback": st.get("graph_fallback", ""),
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


def config(args: argparse.Namespace, prompts: int, group_size: int, decoder: str, **extra: object) -> dict:
    """One configuration for :func:`run_one`: the command line's settings for (prompts, G, decoder)."""
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


def configs(args: argparse.Namespace) -> list[dict]:
    """Every (prompts, G, decoder), or with ``--rollout-memory`` every (prompts, G, budget) of the engine.

    Decoder configurations with more than ``--max-sequences`` sequences come already skipped.
    """
    if args.rollout_memory:
        return [
            config(args, prompts, g, "engine", rollout_memory=budget)
            for prompts in args.prompts
            for g in args.group_sizes
            for budget in args.rollout_memory
        ]
    out = []
    for prompts in args.prompts:
        for g in args.group_sizes:
            for decoder in args.decoders:
                widths = args.decode_widths if decoder == "engine" and args.decode_widths != ["auto"] else [None]
                for width in widths:
                    out.append(config(args, prompts, g, decoder, **({"decode_width": width} if width else {})))
                    if prompts * g > args.max_sequences:
                        out[-1]["skipped"] = f"{prompts * g} sequences > --max-sequences"
    return out


def run(args: argparse.Namespace) -> dict:
    """Each configuration in a fresh process: ``{"rows": [...]}``."""
    return {"rows": spawn_all("rollout", configs(args), timeout=args.timeout)}


# -- tables --------------------------------------------------------------------------------------
def memory_bytes(r: dict) -> float:
    """A row's peak memory: the CUDA allocator's on a GPU, else the rise of resident memory."""
    return r.get("cuda_peak_bytes", r["peak_rss_delta_bytes"])


def memory_header(rows: list[dict]) -> str:
    """The memory column's name for these rows."""
    return "CUDA peak MiB" if any("cuda_peak_bytes" in r for r in rows) else "RSS rise MiB"


def versus(rows: list[dict], r: dict, decoder: str, value: Callable[[dict], float], width: str | None = None) -> str:
    """``value(r)`` over ``value`` of the row of ``decoder`` (with ``decode_width`` ``width``, when given)
    with the same prompts and G ('' without one)."""
    peer = next(
        (
            x
            for x in rows
            if "skipped" not in x
            and x["decoder"] == decoder
            and (width is None or x.get("decode_width") == width)
            and (x["prompts"], x["group_size"]) == (r["prompts"], r["group_size"])
        ),
        None,
    )
    return ratio(value(r), value(peer)) if peer is not None else ""


def decoder_table(rows: list[dict]) -> str:
    """The decoder comparison, one row per configuration.

    Columns: slots, KV bytes held, peak memory (CUDA or RSS rise), decode steps and their lower bound,
    tokens/s and wall time, then ratios to ``hf_micro`` (steps, tokens/s) and ``hf_full`` (memory) of
    the same prompts and G, and to ``hf_cb`` (tokens/s, memory) when the rows have it.
    """
    columns: list[Column] = [
        ("prompts", cell("prompts")),
        ("G", cell("group_size")),
        ("decoder", cell("decoder")),
        ("slots", cell("slots_used")),
        ("KV MiB", lambda r: mib(r["kv_bytes_peak"])),
        (memory_header(rows), lambda r: mib(memory_bytes(r))),
        ("decode steps", cell("decode_steps")),
        ("lower bound", cell("lower_bound_steps")),
        ("tokens/s", cell("tokens_per_s", ".0f")),
        ("wall s", cell("wall_time_s", ".2f")),
        ("steps vs hf_micro", lambda r: versus(rows, r, "hf_micro", lambda x: x["decode_steps"])),
        ("tok/s vs hf_micro", lambda r: versus(rows, r, "hf_micro", lambda x: x["tokens_per_s"])),
        ("memory vs hf_full", lambda r: versus(rows, r, "hf_full", memory_bytes)),
    ]
    if any(r["decoder"] == "hf_cb" for r in rows):  # older tables (without it) re-print as recorded
        columns += [
            ("tok/s vs hf_cb", lambda r: versus(rows, r, "hf_cb", lambda x: x["tokens_per_s"])),
            ("memory vs hf_cb", lambda r: versus(rows, r, "hf_cb", memory_bytes)),
        ]
    keys = 3
    if any("decode_width" in r for r in rows):  # engine rows of each decode width, and their speed-up
        columns.insert(3, ("width", lambda r: r.get("decode_width", "")))
        tokens = lambda x: x["tokens_per_s"]  # noqa: E731
        columns.append(("tok/s vs pool width", lambda r: versus(rows, r, "engine", tokens, "pool")))
        keys = 4
    return markdown_table(columns, rows, keys=keys)


def budget_table(rows: list[dict]) -> str:
    """The ``--rollout-memory`` table: slots chosen per budget, bytes planned, peak measured."""
    columns: list[Column] = [
        ("budget", cell("rollout_memory")),
        ("prompts x G", lambda r: f"{r['prompts']} x {r['group_size']}"),
        ("auto slots", cell("auto_slots")),
        ("slots used", cell("slots_used")),
        ("tokens a slot", cell("max_len")),
        ("planned MiB", lambda r: mib(r["planned_bytes"])),
        ("KV held MiB", lambda r: mib(r["kv_bytes_peak"])),
        (memory_header(rows), lambda r: mib(memory_bytes(r))),
        ("measured / planned", lambda r: f"{memory_bytes(r) / r['planned_bytes']:.2f}"),
        ("decode steps", cell("decode_steps")),
        ("tokens/s", cell("tokens_per_s", ".0f")),
    ]
    return markdown_table(columns, rows, keys=2)


def tables(result: dict) -> str:
    """The budget table for ``--rollout-memory`` rows, else the decoder comparison."""
    rows = result["rows"]
    return budget_table(rows) if any("rollout_memory" in r for r in rows) else decoder_table(rows)


def add_args(ap: argparse.ArgumentParser) -> None:
    """The rollout benchmark's own arguments."""
    ap.add_argument("--model", default="tiny", help=NAMES_HELP)
    ap.add_argument("--group-sizes", type=int, nargs="+", default=[8, 32, 128, 512])
    ap.add_argument("--prompts", type=int, nargs="+", default=[1, 8], help="prompts per step")
    ap.add_argument("--num-slots", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument(
        "--decoders",
        nargs="+",
        default=["hf_full", "hf_micro", "engine"],
        choices=choices(Decoder),
        help="decoders to compare (hf_cb: transformers' continuous batching; its log-probs are taken after "
        "top-k / top-p and its completions depend on the schedule)",
    )
    ap.add_argument(
        "--decode-widths",
        nargs="+",
        default=["auto"],
        choices=choices(DecodeWidth),
        help="the engine's decode_width, one engine row per value (pool: every slot each step; busy: the "
        "running sequences only; auto: busy off CUDA)",
    )
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


BENCH = Benchmark("rollout", __doc__, add_args, run, tables, run_one=run_one, threads=0)


def main(argv: list[str] | None = None) -> list[dict]:
    """Compares the decoders on every (prompts, G), each configuration in a fresh process; returns the rows.

    Prints each row as JSON to stderr and the table to stdout, and writes ``--json``. With
    ``--rollout-memory`` it runs the engine under each budget instead.
    """
    return BENCH.main(argv).get("rows", [])


if __name__ == "__main__":
    main()
