"""Benchmark: what one decode step of the engine asks of the machine, counted on any device.

    python -m benchmarks decode-step --model tiny --prompts 1 --group-size 64 --num-slots 16 --threads 1

A GPU decode step is fast only when it has a static shape, no host synchronizations, no
per-sequence kernels and few operators beyond the model's own forward. Those properties do not need
a GPU to be seen: this benchmark runs one rollout with the engine and counts, on whatever device it
runs on,

- **input shapes**: the distinct (input ids, attention mask) shapes the model saw over the rollout's
  decode steps (a forward pre-hook; prefill forwards, whose queries are longer than one token, are
  not counted). One shape is what CUDA graphs and per-shape attention plans need.
- **operators per step vs a bare forward**: every aten operator dispatched during the rollout
  (``TorchDispatchMode``: views included, prefill and admission amortized in) divided by the decode
  steps, over the operators of one bare forward of the model on the same batch (``num_slots`` rows of
  one token over a ``DynamicCache`` holding as many positions as the pool is wide, 2D mask).
- **random-number calls per step**: aten random ops (``rand``, ``uniform_``, ``normal_``,
  ``exponential_``, ``multinomial``, ...) over the rollout, per decode step.
- **scalar reads per step**: ``aten._local_scalar_dense`` (what ``.item()``, ``int(t)``, ``bool(t)``
  dispatch) over the rollout, per decode step.

The rollout runs the step a GPU runs (``decode_width: pool``, every slot every step; a CPU's default
computes only the busy slots), with refill 'fifo' and no length predictor (whose statistics after the
rollout are not part of decoding), on one thread unless ``--threads`` says otherwise (as the recorded figures
were). Prints a table, writes ``--json``.
"""

from __future__ import annotations

import argparse
import collections
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.harness import Benchmark
from benchmarks.models import NAMES_HELP, bench_setup
from benchmarks.table import Column, cell, markdown_table
from infgrpo.sampler import MicroGroupSampler, SamplerConfig

RANDOM_OPS = {"rand", "rand_like", "uniform", "normal", "exponential", "multinomial", "random", "bernoulli", "randint"}


class OpCounter(TorchDispatchMode):
    """Counts the aten operators dispatched inside the ``with`` block, by name (overload packet)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        """Counts ``func`` and runs it unchanged."""
        self.counts[func.overloadpacket.__name__.rstrip("_")] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        """Operators counted so far."""
        return sum(self.counts.values())

    def count(self, names: set[str]) -> int:
        """Operators counted whose name (trailing ``_`` of in-place ops dropped) is in ``names``."""
        return sum(n for op, n in self.counts.items() if op in names)


def bare_forward_ops(model: torch.nn.Module, rows: int, width: int) -> int:
    """Operators of one plain HF decode forward: ``rows`` tokens over a DynamicCache of ``width`` positions."""
    device = next(model.parameters()).device
    with torch.no_grad():
        past = model(input_ids=torch.full((rows, width), 5, device=device), use_cache=True).cache
        ids = torch.full((rows, 1), 5, device=device)
        mask = torch.ones(rows, width + 1, dtype=torch.long, device=device)
        with OpCounter() as ops:
            model(input_ids=ids, attention_mask=mask, cache=past, use_cache=True)
    return ops.total


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One rollout under the counters (threads as ``--threads`` set them); returns the four figures and the stats."""
    model, prompts, pad_id, stop_ids = bench_setup(args.model, args.prompts, 0, args.stop_fraction)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    cfg = SamplerConfig(  # no length predictor: its statistics after the rollout are not the decode step's
        num_slots=args.num_slots,
        max_new_tokens=args.max_new_tokens,
        stop_token_ids=stop_ids[1:],
        refill="fifo",
        length_predictor="none",
        decode_width="pool",  # the step a GPU runs (CUDA's default), whatever device counts it
    )
    sampler = MicroGroupSampler(model, stop_ids[0], cfg, pad_id=pad_id)
    sampler.sample(prompts[:1], 2, seed=99)  # warm-up: lazy initializations out of the count
    shapes: collections.Counter[tuple] = collections.Counter()

    def record(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if ids is not None and ids.shape[-1] == 1:  # decode steps only (prefill queries are longer)
            shapes[(tuple(ids.shape), tuple(mask.shape) if isinstance(mask, torch.Tensor) else None)] += 1

    hook = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        with OpCounter() as ops:
            out = sampler.sample(prompts, args.group_size, seed=args.seed)
    finally:
        hook.remove()
    steps = max(out.stats["decode_steps"], 1)
    bare = bare_forward_ops(model, out.stats["num_slots"], out.stats["pool_positions"])
    return {
        "model": args.model,
        "prompts": args.prompts,
        "group_size": args.group_size,
        "num_slots": out.stats["num_slots"],
        "max_new_tokens": args.max_new_tokens,
        "threads": torch.get_num_threads(),
        "device": device,
        "decode_steps": out.stats["decode_steps"],
        "generated_tokens": out.stats["generated_tokens"],
        "input_shapes": len(shapes),
        "ops_per_step": ops.total / steps,
        "bare_forward_ops": bare,
        "ops_vs_bare_forward": ops.total / steps / bare,
        "random_calls_per_step": ops.count(RANDOM_OPS) / steps,
        "scalar_reads_per_step": ops.count({"_local_scalar_dense"}) / steps,
        "top_ops_per_step": {k: round(v / steps, 2) for k, v in ops.counts.most_common(12)},
    }


def tables(result: dict[str, Any]) -> str:
    """The four figures as a Markdown table (one row: the rollout measured)."""
    columns: list[Column] = [
        ("prompts x G", lambda r: f"{r['prompts']} x {r['group_size']}"),
        ("slots", cell("num_slots")),
        ("decode steps", cell("decode_steps")),
        ("input shapes", cell("input_shapes")),
        ("ops per step", cell("ops_per_step", ".0f")),
        ("bare forward ops", cell("bare_forward_ops")),
        ("ops vs bare forward", cell("ops_vs_bare_forward", ".2f")),
        ("random calls / step", cell("random_calls_per_step", ".2f")),
        ("scalar reads / step", cell("scalar_reads_per_step", ".2f")),
    ]
    return markdown_table(columns, [result], keys=1)


def add_args(ap: argparse.ArgumentParser) -> None:
    """The decode-step benchmark's own arguments."""
    ap.add_argument("--model", default="tiny", help=NAMES_HELP)
    ap.add_argument("--prompts", type=int, default=1)
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--num-slots", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--stop-fraction", type=float, default=0.02, help="random-weight models: stop-token share")
    ap.add_argument("--seed", type=int, default=0)


BENCH = Benchmark("decode-step", __doc__, add_args, measure, tables, threads=1)

main = BENCH.main  # main(argv=None) -> the result: what --json writes

if __name__ == "__main__":
    main()
