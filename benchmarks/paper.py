"""Benchmark suite at the paper's scale: decoders, one GRPO step, and a large group, each time-boxed.

    python -m benchmarks paper --parts checks b a   # a lent GPU: the CUDA tests, one GRPO step, the decoders
    python -m benchmarks paper                      # one H100/H200: Qwen3-1.7B shape, bf16, ~8 minutes
    python -m benchmarks paper --small              # the same suite on the 42M model on a CPU, a few minutes
    python -m benchmarks paper --model PATH         # a local model folder (your own weights) instead

Parts run in the order given (default: checks, b, a, c), each in its own time box (``FULL['boxes']``;
the suite as a whole stops starting anything at ``--budget`` seconds), each configuration in a fresh
process; each part's JSON (``<json-dir>/paper_<part>.json``) is rewritten after every configuration
(``complete`` false until the part ends), so a GPU lease that ends early still leaves what finished.
After each part one line per row says its ``graph_captures`` and any eager fallback (a capture that
failed: the step ran without CUDA graphs, and why):

- ``checks``: first the CUDA-only tests, ``pytest -m gpu tests/gpu`` in their own time box
  (:mod:`~benchmarks.gpu_tests`; counts and failures in the JSON, pytest's output in
  ``<json-dir>/paper_tests.log``); then on CUDA, the counter-based hash on the device equals the CPU's,
  and a rollout replayed from a CUDA graph gives the same completions as the eager step (``cuda_graphs`` off).
- ``a``: decoders side by side, 1 prompt x G=32, 1,024 new tokens, long-tailed lengths (stop
  fraction 0.003): the engine (8 and 16 slots; CUDA graphs on and off; other attention kernels),
  ``hf_full`` (HF generate over the group), ``hf_micro`` (HF generate, 8 at a time) and ``hf_cb``
  (transformers' continuous batching, ``generate_batch``, 16 sequences a forward and K/V for 16, as
  the engine's pool; skipped with the reason where it cannot run): decode steps, ms per step,
  generated tokens/s, CUDA peak above the weights, with ratios to ``hf_full`` and to ``hf_cb``.
- ``b``: one GRPO step of ``configs/qwen3.yaml``'s recipe at that shape (4-bit nf4 + LoRA r=16,
  G=32, 16 slots, 768 new tokens, dapo, chunked LM head, ``token_budget: auto``), the second of two
  Lightning steps (``bench step``'s ``measure_step``): rollout and update seconds, CUDA peak
  allocated per phase and reserved.
- ``c``: G=128 on 32 slots against ``hf_full``: memory.

Random weights never choose EOS, so a slice of the vocabulary (the suite's stop fraction) stops
completions (:mod:`benchmarks.models`). Prints the tables at the end, a CUDA-graph table among
them (``--json`` also writes the whole suite in one file).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks import gpu_tests, rollout
from benchmarks.harness import MIN_BOX_S, Benchmark, spawn_all, threads_setting
from benchmarks.memory import mib
from benchmarks.models import BENCH_MODELS, NAMES_HELP, bench_setup, save_bench_model, tokenizer_stop_ids
from benchmarks.results import write_json
from benchmarks.table import Column, cell, markdown_table

FULL = dict(
    model="qwen3-1.7b-shape",
    a=dict(group_size=32, max_new_tokens=1024, slots=(8, 16), stop_fraction=0.003),
    b=dict(group_size=32, num_slots=16, max_new_tokens=768, lora_r=16, load_in_4bit=True, compute="bfloat16"),
    c=dict(group_size=128, num_slots=32, max_new_tokens=1024, stop_fraction=0.003),
    boxes=dict(tests=120, checks=90, b=240, a=180, c=180),
)
SMALL = dict(
    model="qwen3-42m",
    a=dict(group_size=16, max_new_tokens=64, slots=(4, 8), stop_fraction=0.02),
    b=dict(group_size=8, num_slots=4, max_new_tokens=32, lora_r=8, load_in_4bit=True, compute="float32"),
    c=dict(group_size=32, num_slots=8, max_new_tokens=48, stop_fraction=0.02),
    boxes=dict(tests=300, checks=120, b=300, a=300, c=240),
)
PARTS = ("checks", "b", "a", "c")
"""The parts, in their default order (``--parts`` runs them in the order given)."""


# -- part b: one GRPO step, in its own process ----------------------------------------------------
def run_step(cfg: dict) -> dict:
    """One GRPO step of ``configs/qwen3.yaml``'s recipe on ``cfg['model']`` (:func:`~benchmarks.step.measure_step`).

    Random-weight bench models are saved with the tiny task's tokenizer and stop on a slice of the
    vocabulary above its ids (:func:`~benchmarks.models.tokenizer_stop_ids`); the recipe's data and
    rewards are replaced by the tiny synthetic task. ``cfg`` may shrink the group, the slots and the
    completions (``--small``) and set the LoRA rank, 4-bit loading and compute dtype.
    """
    from benchmarks.step import measure_step, recipe_kwargs

    with tempfile.TemporaryDirectory() as tmp:
        name = cfg["model"]
        model = save_bench_model(name, Path(tmp) / name)
        random_weights = name in BENCH_MODELS and BENCH_MODELS[name].random_weights
        stop = tokenizer_stop_ids(cfg["stop_fraction"]) if random_weights else []
        sampler = dict(num_slots=cfg["num_slots"], max_new_tokens=cfg["max_new_tokens"], stop_token_ids=stop)
        overrides = dict(group_size=cfg["group_size"], lora={"r": cfg["lora_r"], "alpha": 2 * cfg["lora_r"]})
        overrides.update(
            quantization={"load_in_4bit": cfg["load_in_4bit"], "bnb_4bit_compute_dtype": cfg["compute"]},
            policy={"dtype": cfg["compute"]}, threads=threads_setting(cfg.get("threads")),
        )  # fmt: skip
        module_kwargs, data_kwargs = recipe_kwargs(cfg["config"], model=model, prompts=1, sampler=sampler, **overrides)
        result = measure_step(module_kwargs, data_kwargs)
    return {**cfg, **result}


# -- checks: CUDA only ---------------------------------------------------------------------------
def run_checks(cfg: dict) -> dict:
    """On CUDA: device hash == CPU hash; graph replay == eager step (same completions)."""
    from infgrpo.sampler import MicroGroupSampler, SamplerConfig
    from infgrpo.sampler.engine.counter_rng import mix32

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
    result["graph_fallback"] = on.stats.get("graph_fallback", "")
    result["graph_equals_eager"] = on.completion_ids == off.completion_ids
    result["graph_logprob_max_abs_diff"] = max(
        float((a - b).abs().max()) for a, b in zip(on.logprobs, off.logprobs, strict=True) if len(a) == len(b)
    )
    return result


def run_one(cfg: dict) -> dict:
    """One configuration, in this process: part b's step, the checks, or a decoder row (``bench rollout``'s)."""
    return {"step": run_step, "checks": run_checks}.get(cfg.get("kind"), rollout.run_one)(cfg)


# -- the suite ------------------------------------------------------------------------------------
def part_a(s: dict, model: str) -> list[dict]:
    """Configurations of part (a): engine variants, the two HF baselines and transformers' continuous batching."""
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
    return rows + [dict(base, decoder="hf_cb", num_slots=slots_big)]


def part_c(s: dict, model: str) -> list[dict]:
    """Configurations of part (c): a large group on a pool against HF generate over the whole group."""
    c = s["c"]
    base = dict(model=model, prompts=1, group_size=c["group_size"], seed=0, max_new_tokens=c["max_new_tokens"])
    base.update(stop_fraction=c["stop_fraction"])
    return [
        dict(base, decoder="engine", num_slots=c["num_slots"]),
        dict(base, decoder="hf_full", num_slots=c["group_size"]),
    ]


def part_configs(name: str, s: dict, model: str, recipe: str) -> list[dict]:
    """The configurations of part ``name`` of suite ``s`` (FULL or SMALL) on ``model``."""
    if name == "a":
        return part_a(s, model)
    if name == "c":
        return part_c(s, model)
    stop = s["a"]["stop_fraction"]
    if name == "b":
        return [dict(s["b"], kind="step", model=model, stop_fraction=stop, config=recipe)]
    return [dict(kind="checks", model=model, stop_fraction=stop)]


def run(args: argparse.Namespace) -> dict:
    """Each part in turn, in its time box and the suite's; each part's JSON rewritten as its rows come in."""
    s = SMALL if args.small else FULL
    model = args.model or s["model"]
    deadline = time.monotonic() + args.budget
    parts: dict[str, list[dict]] = {}
    for name in args.parts:
        start, path, rows = time.monotonic(), Path(args.json_dir) / f"paper_{name}.json", []
        if name == "checks":
            rows.append(run_tests(s["boxes"]["tests"], deadline, Path(args.json_dir) / "paper_tests.log"))
            save_part(path, name, args.command, rows, complete=False)
        box_end = min(deadline, time.monotonic() + s["boxes"][name])
        for cfg in part_configs(name, s, model, args.config):
            rows += spawn_all("paper", [dict(cfg, threads=args.threads)], deadline=box_end)
            save_part(path, name, args.command, rows, complete=False)
        save_part(path, name, args.command, rows, complete=True)
        parts[name] = rows
        print("\n".join(part_report(name, rows, time.monotonic() - start)), flush=True)
    return {"parts": parts}


def save_part(path: Path, name: str, command: str, rows: list[dict], complete: bool) -> None:
    """Writes part ``name``'s JSON: its rows so far, and whether the part has ended."""
    write_json(path, {"benchmark": "paper", "part": name, "command": command, "complete": complete, "rows": rows})


def run_tests(box_s: float, deadline: float, log: Path) -> dict:
    """The CUDA-only tests within ``box_s`` seconds and the suite's deadline; their row, its summary printed."""
    left = min(box_s, deadline - time.monotonic())
    row = gpu_tests.run_gpu_tests(left, log) if left >= MIN_BOX_S else {"kind": "tests", "skipped": "time box spent"}
    print("\n".join(gpu_tests.summary({"command": gpu_tests.COMMAND, **row})), flush=True)
    return row


def row_label(part: str, r: dict) -> str:
    """A row's configuration in words, for the graph report and table."""
    if r.get("kind") == "tests":
        return "CUDA-only tests"
    if r.get("kind") == "checks":
        return "graph == eager check"
    if r.get("kind") == "step":
        return f"GRPO step G={r['group_size']}"
    return f"{label(r)} G={r['group_size']}"


def graph_rows(parts: dict[str, list[dict]]) -> list[dict]:
    """The rows (with their part) that ran the engine's decode step and report ``graph_captures``."""
    engine = [(n, r) for n, rows in parts.items() for r in rows if r.get("decoder", "engine") == "engine"]
    return [dict(r, part=name) for name, r in engine if "graph_captures" in r]


def fallback(r: dict) -> str:
    """A row's eager fallback: the failed capture's reason, 'off by setting', or 'none'."""
    return r.get("graph_fallback") or ("off by setting" if r.get("cuda_graphs") == "off" else "none")


def part_report(name: str, rows: list[dict], seconds: float) -> list[str]:
    """What is printed as a part ends: its rows that ran, then each decode step's graph captures and fallback."""
    ran = sum("skipped" not in r for r in rows)
    lines = [f"[paper] part {name} done in {seconds:.0f} s: {ran} of {len(rows)} rows ran"]
    for r in graph_rows({name: rows}):
        lines.append(
            f"[paper]   {row_label(name, r)}: graph_captures {r['graph_captures']}, eager fallback: {fallback(r)}"
        )
    return lines


# -- tables --------------------------------------------------------------------------------------
def label(r: dict) -> str:
    """A decoder row's decoder and the settings that tell it apart."""
    extra = []
    if r.get("cuda_graphs"):
        extra.append(f"graphs {r['cuda_graphs']}")
    if r.get("decode_attention"):
        extra.append(f"{r['decode_attention']} attention")
    return r["decoder"] + (f" ({', '.join(extra)})" if extra else "")


def step_memory(r: dict) -> str:
    """Part b's memory: CUDA peaks allocated by phase and reserved, or the RSS rise by phase."""
    if "cuda_peak_allocated_bytes" not in r:
        return f"RSS rise: rollout {mib(r['rss_rollout_rise_bytes'])} / update {mib(r['rss_update_rise_bytes'])} MiB"
    gb = {k: r[f"cuda_{k}_bytes"] / 1e9 for k in ("rollout_peak_allocated", "update_peak_allocated", "peak_reserved")}
    return (
        f"rollout {gb['rollout_peak_allocated']:.2f} / update {gb['update_peak_allocated']:.2f} GB allocated, "
        f"{gb['peak_reserved']:.2f} GB reserved"
    )


def decoder_table(parts: dict[str, list[dict]]) -> str:
    """Parts a and c: decode steps, ms per step, tokens/s and memory, with ratios to the part's ``hf_full``
    (and its ``hf_cb``, when a part has one)."""
    rows = [dict(r, part=name) for name in ("a", "c") for r in parts.get(name, [])]

    def versus(decoder: str, value: Callable[[dict], float]) -> Callable[[dict], str]:
        return lambda r: rollout.versus(parts[r["part"]], r, decoder, value)

    columns: list[Column] = [
        ("part", cell("part")),
        ("configuration", lambda r: f"{label(r)} G={r['group_size']}"),
        ("slots", lambda r: r.get("slots_used", r["num_slots"])),
        ("decode steps", cell("decode_steps")),
        ("ms / step", cell("ms_per_step", ".1f")),
        ("tokens/s", cell("tokens_per_s", ".0f")),
        ("tok/s vs hf_full", versus("hf_full", lambda x: x["tokens_per_s"])),
        ("memory MiB", lambda r: mib(rollout.memory_bytes(r))),
        ("memory vs hf_full", versus("hf_full", rollout.memory_bytes)),
    ]
    if any(r["decoder"] == "hf_cb" for r in rows):  # older files (without it) re-print as recorded
        columns += [
            ("tok/s vs hf_cb", versus("hf_cb", lambda x: x["tokens_per_s"])),
            ("memory vs hf_cb", versus("hf_cb", rollout.memory_bytes)),
        ]
    return markdown_table(columns, rows, keys=3)


def step_table(rows: list[dict]) -> str:
    """Part b: the rollout's decode steps, ms per step and tokens/s; rollout and update seconds; memory by phase."""

    def steps(r: dict) -> float:
        return r.get("decode_steps", 0)

    columns: list[Column] = [
        ("part", lambda r: "b"),
        ("configuration", lambda r: f"GRPO step G={r['group_size']}"),
        ("slots", cell("num_slots")),
        ("decode steps", lambda r: f"{steps(r):.0f}"),
        ("ms / step", lambda r: f"{1000 * r['rollout_time_s'] / max(steps(r), 1):.1f}"),
        ("tokens/s", lambda r: f"{r.get('generated_tokens', 0) / r['rollout_time_s']:.0f}"),
        ("rollout s", cell("rollout_time_s", ".1f")),
        ("update s", cell("update_time_s", ".1f")),
        ("memory", step_memory),
    ]
    return markdown_table(columns, rows, keys=3)


def checks_table(rows: list[dict]) -> str:
    """The CUDA checks: device hash == CPU hash, graph replay == eager step."""
    columns: list[Column] = [
        ("part", lambda r: "checks"),
        ("model", cell("model")),
        ("hash on CUDA == CPU", lambda r: r["hash_cuda_equals_cpu"]),
        ("graph captures", lambda r: r["graph_captures"]),
        ("graph == eager", lambda r: r["graph_equals_eager"]),
        ("graph log-prob max abs diff", lambda r: f"{r['graph_logprob_max_abs_diff']:.3g}"),
    ]
    return markdown_table(columns, rows, keys=2)


def short_test(test: str) -> str:
    """``tests.gpu.test_x::test_y[p]`` -> ``test_x::test_y[p]`` (the module without its package)."""
    module, _, name = test.partition("::")
    return f"{module.rsplit('.', 1)[-1]}::{name}"


def tests_table(rows: list[dict]) -> str:
    """The CUDA-only tests: counts, seconds and the failed tests."""
    columns: list[Column] = [
        ("part", lambda r: "checks"),
        ("tests", lambda r: gpu_tests.COMMAND),
        *((k.replace("_tests", ""), lambda r, k=k: r.get(k, 0)) for k in gpu_tests.OUTCOMES),
        ("seconds", lambda r: f"{r['seconds']:.0f}" if "seconds" in r else ""),
        ("failures", lambda r: "; ".join(short_test(f["test"]) for f in r.get("failures", [])) or "none"),
    ]
    return markdown_table(columns, rows, keys=2)


def graph_table(parts: dict[str, list[dict]]) -> str:
    """Every row that ran the engine's decode step: its CUDA-graph captures and any eager fallback."""
    columns: list[Column] = [
        ("part", cell("part")),
        ("configuration", lambda r: row_label(r["part"], r)),
        ("graph captures", cell("graph_captures")),
        ("eager fallback", fallback),
    ]
    return markdown_table(columns, graph_rows(parts), keys=2)


def tables(result: dict) -> str:
    """The decoders (parts a, c), the GRPO step (b), the checks and tests, the CUDA graphs: of the whole
    suite (``parts``) or one part's file."""
    parts = result["parts"] if "parts" in result else {result["part"]: result["rows"]}
    out = [decoder_table(parts)] if parts.get("a") or parts.get("c") else []
    out += [step_table(parts["b"])] if parts.get("b") else []
    checks = [r for r in parts.get("checks", []) if r.get("kind") != "tests"]
    out += [checks_table(checks)] if checks else []
    tests = [r for r in parts.get("checks", []) if r.get("kind") == "tests"]
    out += [tests_table(tests)] if tests else []
    return "\n\n".join(out + ([graph_table(parts)] if graph_rows(parts) else []))


def from_file(result: dict, path: Path) -> dict:
    """A part's JSON for :func:`tables`: files written before the ``part`` field are named ``paper_<part>.json``."""
    if "parts" not in result and "part" not in result:
        result = {**result, "part": path.stem.removeprefix("paper_")}
    return result


def add_args(ap: argparse.ArgumentParser) -> None:
    """The suite's own arguments."""
    ap.add_argument("--small", action="store_true", help="the 42M model on a CPU, shrunk to a few minutes")
    ap.add_argument("--model", default=None, help=f"default: the suite's; {NAMES_HELP}")
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS, help="run in the order given")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole suite")
    ap.add_argument("--json-dir", default="benchmarks/paper", help="where each part's paper_<part>.json goes")
    ap.add_argument("--config", default="configs/qwen3.yaml", help="the recipe part (b) runs one step of")


BENCH = Benchmark("paper", __doc__, add_args, run, tables, run_one=run_one, threads=0)


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    """Runs the suite (see the module docstring); returns the rows of each part."""
    return BENCH.main(argv).get("parts", {})


if __name__ == "__main__":
    main()
