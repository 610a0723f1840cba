"""Benchmark: what each rank of a sharded run (``trainer.strategy: fsdp2``) holds, against one process.

    python -m benchmarks sharded-memory --model smollm2 --json benchmarks/sharded_memory_smollm2.json
    python -m benchmarks sharded-memory --model tiny --steps 1     # seconds

Runs ``python -m infgrpo.fit`` for ``--steps`` full fine-tuning steps (AdamW) twice, each a fresh process group:
once in one process, once on ``--ranks`` processes under ``torchrun`` with ``--trainer.strategy fsdp2`` (gloo on a
CPU). A callback counts, on every rank, the bytes of the tensors the rank holds: between steps (after the last
step's update) its parameters, gradients and optimizer state (the local shards of the sharded run's DTensors),
and during the rollout the parameters the sampler decodes with (gathered in full on every rank: the price of a
rollout with no collective inside its decode loop). Counted from the tensors' sizes, not from the allocator: the
figures are exact on any device; a CUDA run adds the allocator's peaks in ``train/memory/*``. Each rank also loads
the whole model on its CPU before sharding it, a host-memory cost this benchmark does not count.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import lightning as L
import torch

from benchmarks.harness import Benchmark
from benchmarks.table import cell, markdown_table, ratio
from infgrpo.trainer.sharding import local_bytes

MODELS = {
    "tiny": ["--model.policy.model_name_or_path=tiny", "--data.path=tiny"],
    "smollm2": ["--config=configs/smollm2-cpu.yaml", "--model.lora.r=0", "--data.eval_size=0"],
}
"""Model (and its task) -> the fit flags that select them; ``smollm2`` is SmolLM2-135M on ``chain_sum``."""


class CountBytes(L.Callback):
    """Writes ``rank{R}.json``: bytes of parameters, gradients and optimizer state held between steps (after the last
    step), and of the parameters held while the rollout decodes (the largest over the steps)."""

    def __init__(self, dirpath: str) -> None:
        self.dirpath, self.rollout_bytes = Path(dirpath), 0

    def on_train_start(self, trainer, pl_module) -> None:  # noqa: ANN001 - Lightning's hook signature
        """Wraps the sampler: each rollout first counts the parameters the rank holds (gathered, when sharded)."""
        sample = pl_module.sampler.sample

        def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - passes through
            held = sum(local_bytes(p) for p in pl_module.policy.parameters())  # gathered: full tensors
            self.rollout_bytes = max(self.rollout_bytes, held)
            return sample(*args, **kwargs)

        pl_module.sampler.sample = counted

    def on_train_end(self, trainer, pl_module) -> None:  # noqa: ANN001
        """Counts what the rank holds after the last step and writes the record."""
        params = list(pl_module.policy.parameters())
        state = trainer.optimizers[0].state
        optimizer = sum(local_bytes(v) for p in params for v in state.get(p, {}).values() if torch.is_tensor(v))
        record = {
            "parameters": sum(local_bytes(p) for p in params),
            "gradients": sum(local_bytes(p.grad) for p in params if p.grad is not None),
            "optimizer": optimizer,
            "rollout_parameters": self.rollout_bytes,
            "numel": sum(p.numel() for p in params),
        }
        (self.dirpath / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


def add_args(ap: argparse.ArgumentParser) -> None:
    """The model, the ranks and the steps."""
    ap.add_argument("--model", default="smollm2", choices=sorted(MODELS))
    ap.add_argument("--ranks", type=int, default=2, help="processes of the sharded run")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")


def fit(model: str, steps: int, ranks: int, out: Path, timeout: float, threads: int) -> list[dict]:
    """One run (``ranks`` > 1: sharded, under torchrun); every rank's record."""
    callback = {"class_path": f"{__name__}.CountBytes", "init_args": {"dirpath": str(out)}}
    flags = [
        *MODELS[model], "--model.group_size=4", "--model.sampler.max_new_tokens=16", "--data.batch_size=2",
        f"--trainer.max_steps={steps}", "--trainer.logger=false",
        "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={out}", "--trainer.accelerator=cpu",
        f"--trainer.callbacks+={json.dumps(callback)}", f"--model.threads={threads or 'auto'}",
    ]  # fmt: skip
    if ranks > 1:
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
        cmd = [*launch, "-m", "infgrpo.fit", *flags, "--trainer.strategy=fsdp2", f"--trainer.devices={ranks}"]
    else:
        cmd = [sys.executable, "-m", "infgrpo.fit", *flags]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads or 1), "PYTHONPATH": os.getcwd()}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


def run(args: argparse.Namespace) -> dict:
    """The one-process run, then the sharded run."""
    with tempfile.TemporaryDirectory() as tmp:
        one = fit(args.model, args.steps, 1, Path(tmp) / "one", args.timeout, args.threads)
        sharded = fit(args.model, args.steps, args.ranks, Path(tmp) / "sharded", args.timeout, args.threads)
    return {"model": args.model, "ranks": args.ranks, "steps": args.steps, "one": one[0], "sharded": sharded}


KINDS = ("parameters", "gradients", "optimizer", "rollout_parameters")


def tables(result: dict) -> str:
    """Bytes per rank (MiB) and their ratio to one process."""
    one, rows = result["one"], []
    for name in KINDS:
        row = {"held": name.replace("_", " "), "one process MiB": one[name] / 2**20}
        for r, rank in enumerate(result["sharded"]):
            row[f"rank {r} MiB"] = rank[name] / 2**20
            row[f"rank {r} / one"] = ratio(rank[name], one[name])
        rows.append(row)
    title = (
        f"## {result['model']} ({result['one']['numel'] / 1e6:.1f}M parameters), full fine-tuning, AdamW: bytes each "
        f"rank holds on {result['ranks']} sharded ranks (fsdp2) against one process, between steps and while the "
        "rollout decodes"
    )
    columns = [(header, cell(header, ".1f" if "MiB" in header else "")) for header in rows[0]]
    return f"{title}\n\n{markdown_table(columns, rows)}"


BENCH = Benchmark("sharded-memory", __doc__, add_args, run, tables, threads=1)


def main(argv: list[str] | None = None) -> dict:
    """``python -m benchmarks sharded-memory``."""
    return BENCH.main(argv)
