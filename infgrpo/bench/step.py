"""Benchmark: peak memory and time of one GRPO step, 4-bit + LoRA vs LoRA vs full fine-tuning.

    python -m infgrpo.bench step --model tiny --json benchmarks/step_tiny.json
    python -m infgrpo.bench step --model qwen3-42m --json benchmarks/step_qwen3_42m.json

Each variant runs in a fresh process: a Lightning ``Trainer`` runs two steps of ``GRPOModule``
(rollout + update); the second is measured (the first pays one-time initialization). Memory: the
CUDA allocator peak on GPU; on CPU the rise of resident memory during the step (polled every 2 ms)
and the resident memory after loading. ``qwen3-42m`` is saved to a temporary folder first, so it goes
through the same ``from_pretrained`` path as a hub model.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import psutil
import torch

from infgrpo.bench.results import write_json
from infgrpo.bench.rollout import PeakRSS, mib, spawn

VARIANTS = {
    "float-full": dict(lora_r=0),
    "float-lora": dict(lora_r=8),
    "4bit-lora": dict(lora_r=8, load_in_4bit=True, bnb_4bit_compute_dtype="float32"),
}


class StepMeter(L.Callback):
    """Times and measures memory of the training step with index ``measure``."""

    def __init__(self, measure: int = 1) -> None:
        self.measure, self.result = measure, {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:  # noqa: ANN001
        """At step ``measure``: resets the CUDA peak, starts polling the RSS and starts the clock.

        Callbacks run before the module's own ``on_train_batch_start``, so the rollout is measured too.
        """
        if batch_idx == self.measure:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                self.cuda_base = torch.cuda.memory_allocated()
            self.rss = PeakRSS().__enter__()
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        """At step ``measure``: puts the step's time, RSS rise and base, and CUDA peak rise into ``result``."""
        if batch_idx == self.measure:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                self.result["cuda_peak_bytes"] = torch.cuda.max_memory_allocated() - self.cuda_base
            self.result["step_time_s"] = time.perf_counter() - self.start
            self.rss.__exit__()
            self.result["rss_rise_bytes"] = self.rss.peak - self.rss.base
            self.result["rss_before_step_bytes"] = self.rss.base


def run_one(cfg: dict) -> dict:
    """One variant, in this process: two Lightning steps of ``GRPOModule``, the second measured.

    Returns ``cfg`` with the :class:`StepMeter` results, the RSS after loading the model and the number
    of trainable parameters. ``qwen3-42m`` is saved to a temporary folder and loaded from there.
    """
    from infgrpo import GRPOModule, SamplerConfig
    from infgrpo.data import PromptDataModule

    with tempfile.TemporaryDirectory() as tmp:
        model = "tiny"
        if cfg["model"] == "qwen3-42m":
            from infgrpo.bench.models import random_qwen3
            from infgrpo.models import load_tokenizer

            model = str(Path(tmp) / "qwen3-42m")
            random_qwen3().save_pretrained(model)
            load_tokenizer("tiny").save_pretrained(model)  # token ids of the tiny task, all < 103
        module = GRPOModule(
            model=model,
            group_size=cfg["group_size"],
            accuracy_reward="synthetic",
            sampler=SamplerConfig(num_slots=cfg["num_slots"], max_new_tokens=cfg["max_new_tokens"]),
            **VARIANTS[cfg["variant"]],
        )
        loaded_rss = psutil.Process().memory_info().rss
        meter = StepMeter()
        trainer = L.Trainer(
            max_steps=2,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            callbacks=[meter],
        )
        trainer.fit(module, PromptDataModule(path="tiny", tokenizer=model, batch_size=cfg["prompts"], eval_split=None))
        trainable = sum(p.numel() for p in module.policy.parameters() if p.requires_grad)
    return {
        **cfg,
        **meter.result,
        "rss_after_load_bytes": loaded_rss,
        "trainable_params": trainable,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
    }


def main(argv: list[str] | None = None) -> list[dict]:
    """Runs each variant in a fresh process, prints a Markdown table, writes ``--json`` and returns the rows.

    The table: trainable parameters, RSS after loading, the step's memory rise (CUDA peak on GPU), its
    time, and that time over ``float-full``'s.
    """
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="tiny", help="tiny or qwen3-42m")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--num-slots", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--json", default=None)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return []
    rows = []
    for variant in args.variants:
        cfg = dict(
            model=args.model,
            variant=variant,
            group_size=args.group_size,
            prompts=args.prompts,
            num_slots=args.num_slots,
            max_new_tokens=args.max_new_tokens,
        )
        rows.append(spawn(cfg, bench="step"))
    base = next((r for r in rows if r["variant"] == "float-full" and "skipped" not in r), None)
    print(
        "| variant | trainable params | RSS after load MiB | step memory rise MiB | step time s | time vs float-full |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['variant']} | skipped: {r['skipped']} | | | | |")
            continue
        mem = r.get("cuda_peak_bytes", r["rss_rise_bytes"])
        ratio = f"{r['step_time_s'] / base['step_time_s']:.2f}" if base else ""
        print(
            f"| {r['variant']} | {r['trainable_params']:,} | {mib(r['rss_after_load_bytes'])} | {mib(mem)} "
            f"| {r['step_time_s']:.2f} | {ratio} |"
        )
    write_json(args.json, {"command": " ".join(sys.argv), "rows": rows})
    return rows


if __name__ == "__main__":
    main()
