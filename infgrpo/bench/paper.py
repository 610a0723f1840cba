"""Benchmark suite at the paper's scale: decoders, one GRPO step, and a large group, each time-boxed.

    python -m infgrpo.bench paper                      # one H100/H200: Qwen3-1.7B shape, bf16, ~8 minutes
    python -m infgrpo.bench paper --small              # the same suite on the 42M model on a CPU, a few minutes
    python -m infgrpo.bench paper --model PATH         # a local model folder (your own weights) instead

Parts, each configuration in a fresh process with its own time box (the suite as a whole stops
starting new ones at ``--budget`` seconds), each part's JSON written as soon as it finishes, so a GPU
lease that ends early still leaves what finished:

- ``checks``: on CUDA, the counter-based hash on the device equals the CPU's, and a rollout replayed
  from a CUDA graph gives the same completions as the eager step (``cuda_graphs`` off).
- ``a``: decoders side by side, 1 prompt x G=32, 1,024 new tokens, long-tailed lengths (stop
  fraction 0.003): the engine (8 and 16 slots; CUDA graphs on and off; other attention kernels),
  ``hf_full`` (HF generate over the group) and ``hf_micro`` (HF generate, 8 at a time): decode steps,
  ms per step, generated tokens/s, CUDA peak above the weights.
- ``b``: one GRPO step of ``configs/qwen3.yaml``'s recipe at that shape (4-bit nf4 + LoRA r=16,
  G=32, 16 slots, 768 new tokens, dapo, chunked LM head, ``token_budget: auto``), the second of two
  Lightning steps (``bench step``'s ``measure_step``): rollout and update seconds, CUDA peak
  allocated per phase and reserved.
- ``c``: G=128 on 32 slots against ``hf_full``: memory.

Random weights never choose EOS, so a slice of the vocabulary (``--stop-fraction``) stops completions,
as in ``bench rollout``. Writes ``<json-dir>/paper_<part>.json`` and prints one table at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from infgrpo.bench.results import write_json
from infgrpo.bench.rollout import mib, spawn
from infgrpo.runtime.threads import set_threads

FULL = dict(
    model="qwen3-1.7b-shape",
    a=dict(group_size=32, max_new_tokens=1024, slots=(8, 16), stop_fraction=0.003),
    b=dict(group_size=32, num_slots=16, max_new_tokens=768, lora_r=16, load_in_4bit=True, compute="bfloat16"),
    c=dict(group_size=128, num_slots=32, max_new_tokens=1024, stop_fraction=0.003),
    boxes=dict(checks=120, a=150, b=240, c=180),
)
SMALL = dict(
    model="qwen3-42m",
    a=dict(group_size=16, max_new_tokens=64, slots=(4, 8), stop_fraction=0.02),
    b=dict(group_size=8, num_slots=4, max_new_tokens=32, lora_r=8, load_in_4bit=True, compute="float32"),
    c=dict(group_size=32, num_slots=8, max_new_tokens=48, stop_fraction=0.02),
    boxes=dict(checks=120, a=240, b=300, c=240),
)


# -- part b: one GRPO step, in its own process ----------------------------------------------------
def run_step(cfg: dict) -> dict:
    """One GRPO step of ``configs/qwen3.yaml``'s recipe on ``cfg['model']`` (:func:`~infgrpo.bench.step.measure_step`).

    Random-weight bench models are saved with the tiny task's tokenizer and stop on a slice of the
    vocabulary above its ids (``stop_fraction``), as ``bench rollout`` does; the recipe's data and
    rewards are replaced by the tiny synthetic task. ``cfg`` may shrink the group, the slots and the
    completions (``--small``) and set the LoRA rank, 4-bit loading and compute dtype.
    """
    from infgrpo.bench.models import QWEN3_VOCAB
    from infgrpo.bench.step import measure_step, recipe_kwargs, save_bench_model

    with tempfile.TemporaryDirectory() as tmp:
        model, stop = cfg["model"], []
        if model in ("qwen3-42m", "qwen3-1.7b-shape"):
            model = save_bench_model(model, Path(tmp) / model)
            stop = list(range(103, 103 + max(1, round(QWEN3_VOCAB * cfg["stop_fraction"]))))
        sampler = dict(num_slots=cfg["num_slots"], max_new_tokens=cfg["max_new_tokens"], stop_token_ids=stop)
        overrides = dict(group_size=cfg["group_size"], lora_r=cfg["lora_r"], lora_alpha=2 * cfg["lora_r"])
        overrides.update(load_in_4bit=cfg["load_in_4bit"], bnb_4bit_compute_dtype=cfg["compute"], dtype=cfg["compute"])
        module_kwargs, data_kwargs = recipe_kwargs(cfg["config"], model=model, prompts=1, sampler=sampler, **overrides)
        result = measure_step(module_kwargs, data_kwargs)
    return {**cfg, **result}


# -- checks: CUDA only ---------------------------------------------------------------------------
def run_checks(cfg: dict) -> dict:
    """On CUDA: device hash == CPU hash; graph replay == eager step (same completions)."""
    from infgrpo.bench.models import bench_setup
    from infgrpo.sampler import MicroGroupSampler, SamplerConfig
    from infgrpo.sampler.counter_rng import mix32

    if not torch.cuda.is_available():
        return {**cfg, "skipped": "no CUDA device"}
    x = torch.randint(0, 2**32, (100_000,), dtype=torch.long)
    result = {**cfg, "hash_cuda_equals_cpu": bool(torch.equal(mix32(x.cuda()).cpu(), mix32(x)))}
    model, prompts, pad_id, stop_ids = bench_setup(cfg["model"], 2, 0, cfg["stop_fraction"])
    model.cuda()
    outs = {}
    for graphs in ("on", "off"):
        sc = SamplerConfig(num_slots=4, max_new_tokens=64, stop_token_ids=stop_ids[1:], cuda_graphs=graphs)
        sampler = MicroGroupSampler(model, stop_ids[0], sc, pad_id=pad_id)
        outs[graphs] = sampler.sample(prompts, 6, seed=3)
    on, off = outs["on"], outs["off"]
    result["graph_captures"] = on.stats["graph_captures"]
    result["graph_equals_eager"] = on.completion_ids == off.completion_ids
    result["graph_logprob_max_abs_diff"] = max(
        float((a - b).abs().max()) for a, b in zip(on.logprobs, off.logprobs, strict=True) if len(a) == len(b)
    )
    return result


ONE = {"step": run_step, "checks": run_checks}


# -- the suite ------------------------------------------------------------------------------------
def part_a(s: dict, model: str) -> list[dict]:
    """Configurations of part (a): engine variants and the two HF baselines."""
    a = s["a"]
    base = dict(model=model, prompts=1, group_size=a["group_size"], seed=0, max_new_tokens=a["max_new_tokens"])
    base.update(stop_fraction=a["stop_fraction"])
    slots_small, slots_big = a["slots"]
    rows = [dict(base, decoder="engine", num_slots=n) for n in (slots_small, slots_big)]
    if torch.cuda.is_available():
        rows.append(dict(base, decoder="engine", num_slots=slots_big, cuda_graphs="off"))
        for kernel in ("cudnn", "math"):
            rows.append(dict(base, decoder="engine", num_slots=slots_big, decode_attention=kernel))
    rows += [dict(base, decoder="hf_full", num_slots=a["group_size"]), dict(base, decoder="hf_micro", num_slots=8)]
    return rows


def part_c(s: dict, model: str) -> list[dict]:
    """Configurations of part (c): a large group on a pool against HF generate over the whole group."""
    c = s["c"]
    base = dict(model=model, prompts=1, group_size=c["group_size"], seed=0, max_new_tokens=c["max_new_tokens"])
    base.update(stop_fraction=c["stop_fraction"])
    return [
        dict(base, decoder="engine", num_slots=c["num_slots"]),
        dict(base, decoder="hf_full", num_slots=c["group_size"]),
    ]


def label(r: dict) -> str:
    """A row's decoder and the settings that tell it apart."""
    extra = []
    if r.get("cuda_graphs"):
        extra.append(f"graphs {r['cuda_graphs']}")
    if r.get("decode_attention"):
        extra.append(f"{r['decode_attention']} attention")
    return r["decoder"] + (f" ({', '.join(extra)})" if extra else "")


def table(parts: dict[str, list[dict]]) -> str:
    """One Markdown table over every part's rows."""
    lines = [
        "| part | configuration | slots | decode steps | ms / step | tokens/s | tok/s vs hf_full | memory MiB "
        "| memory vs hf_full |",
        "|" + "---|" * 9,
    ]
    for name in ("a", "c"):
        rows = parts.get(name, [])
        full = next((r for r in rows if r["decoder"] == "hf_full" and "skipped" not in r), None)
        for r in rows:
            if "skipped" in r:
                skipped = f"skipped: {r['skipped']}"
                lines.append(f"| {name} | {label(r)} G={r['group_size']} | {r['num_slots']} | {skipped} |")
                continue
            mem = r.get("cuda_peak_bytes", r["peak_rss_delta_bytes"])
            fmem = full.get("cuda_peak_bytes", full["peak_rss_delta_bytes"]) if full else 0
            tps = f"{r['tokens_per_s'] / full['tokens_per_s']:.2f}" if full else ""
            mem_ratio = f"{mem / fmem:.2f}" if fmem > 0 else ""
            lines.append(
                f"| {name} | {label(r)} G={r['group_size']} | {r['slots_used']} | {r['decode_steps']} "
                f"| {r['ms_per_step']:.1f} | {r['tokens_per_s']:.0f} | {tps} | {mib(mem)} | {mem_ratio} |"
            )
    for r in parts.get("b", []):
        if "skipped" in r:
            lines.append(f"| b | GRPO step | | skipped: {r['skipped']} |")
            continue
        steps = r.get("decode_steps", 0)
        gb = 1e9
        mem = (
            f"rollout {r['cuda_rollout_peak_allocated_bytes'] / gb:.2f} / update "
            f"{r['cuda_update_peak_allocated_bytes'] / gb:.2f} GB allocated, "
            f"{r['cuda_peak_reserved_bytes'] / gb:.2f} GB reserved"
            if "cuda_peak_allocated_bytes" in r
            else f"RSS rise: rollout {mib(r['rss_rollout_rise_bytes'])} / update {mib(r['rss_update_rise_bytes'])} MiB"
        )
        lines.append(
            f"| b | GRPO step (rollout {r['rollout_time_s']:.1f} s, update {r['update_time_s']:.1f} s) "
            f"| {r['num_slots']} | {steps:.0f} | {1000 * r['rollout_time_s'] / max(steps, 1):.1f} "
            f"| {r.get('generated_tokens', 0) / r['rollout_time_s']:.0f} | | {mem} | |"
        )
    for r in parts.get("checks", []):
        lines.append(f"| checks | {json.dumps({k: v for k, v in r.items() if k not in ('model',)})} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    """Runs the suite (see the module docstring); returns the rows of each part."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--small", action="store_true", help="the 42M model on a CPU, shrunk to a few minutes")
    ap.add_argument("--model", default=None, help="a benchmark model name or a local model folder")
    ap.add_argument("--parts", nargs="+", default=["checks", "a", "b", "c"], choices=["checks", "a", "b", "c"])
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole suite")
    ap.add_argument("--json-dir", default="benchmarks/paper")
    ap.add_argument("--config", default="configs/qwen3.yaml", help="the recipe part (b) runs one step of")
    ap.add_argument("--threads", type=int, default=0, help="torch threads in each process (0 = infgrpo's auto)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        cfg = json.loads(args.one)
        set_threads(cfg.get("threads") or "auto")  # the sampler applies it each rollout (infgrpo.runtime.threads)
        print(json.dumps(ONE[cfg["kind"]](cfg)))
        return {}
    s = SMALL if args.small else FULL
    model = args.model or s["model"]
    deadline = time.monotonic() + args.budget
    parts: dict[str, list[dict]] = {}
    for name in args.parts:
        if name == "a":
            configs = part_a(s, model)
        elif name == "c":
            configs = part_c(s, model)
        elif name == "b":
            stop = s["a"]["stop_fraction"]
            configs = [dict(s["b"], kind="step", model=model, stop_fraction=stop, config=args.config)]
        else:
            configs = [dict(kind="checks", model=model, stop_fraction=s["a"]["stop_fraction"])]
        configs = [dict(c, threads=args.threads) for c in configs]
        box_end = min(deadline, time.monotonic() + s["boxes"][name])
        rows = []
        for cfg in configs:
            left = box_end - time.monotonic()
            if left < 5:
                rows.append({**cfg, "skipped": "time box spent"})
                continue
            bench = "paper" if "kind" in cfg else "rollout"
            rows.append(spawn(cfg, left, bench=bench))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        parts[name] = rows
        write_json(str(Path(args.json_dir) / f"paper_{name}.json"), {"command": " ".join(sys.argv), "rows": rows})
    print(table(parts))
    return parts


if __name__ == "__main__":
    main()
