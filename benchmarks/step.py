"""Benchmark: memory and time of one GRPO step by phase (rollout, update), chunked LM head vs full logits.

    python -m benchmarks step --model tiny --json benchmarks/step_tiny.json
    python -m benchmarks step --model qwen3-42m --json benchmarks/step_qwen3_42m.json

Each configuration (a loading variant: 4-bit + LoRA, LoRA, full fine-tuning; and a log-prob path:
``logit_chunk_tokens`` N, or 0 = full logits) runs in a fresh process: a Lightning ``Trainer`` runs
two steps of ``GRPOModule``; the second is measured (the first pays one-time initialization).
Memory by phase: on GPU the CUDA allocator's peak in the rollout and in the update (reset per phase)
and the most it reserved; on CPU the rise of resident memory within each phase's time window above
its level at the phase's start (polled every 2 ms). Both paths of a variant draw the same rollout, so
their losses must agree. ``qwen3-42m`` (and ``qwen3-1.7b-shape``) are saved to a temporary folder
first (:func:`~benchmarks.models.save_bench_model`), so they go through the same ``from_pretrained``
path as a hub model; their random weights never stop early, so completions run to max_new_tokens.
``--threads`` becomes ``GRPOModule(threads=...)`` in each process.

For other suites, :func:`measure_step` measures one step of any ``GRPOModule`` configuration and
:func:`recipe_kwargs` turns a YAML recipe (``configs/qwen3.yaml``) into one that runs offline.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L
import psutil
import torch

from benchmarks.harness import Benchmark, spawn_all, threads_setting
from benchmarks.memory import RSSTimeline, mib
from benchmarks.models import save_bench_model
from benchmarks.table import Column, cell, markdown_table, ratio
from infgrpo.update.chunked_head import DEFAULT_LOGIT_CHUNK_TOKENS

VARIANTS = {
    "float-full": dict(lora={"r": 0}),
    "float-lora": dict(lora={"r": 8}),
    "4bit-lora": dict(lora={"r": 8}, quantization={"load_in_4bit": True, "bnb_4bit_compute_dtype": "float32"}),
}
MODEL_DEFAULTS = {  # per model: group size, prompts, slots, max new tokens, token budget
    "tiny": dict(group_size=8, prompts=4, num_slots=8, max_new_tokens=64, token_budget=4096),
    "qwen3-42m": dict(group_size=16, prompts=1, num_slots=16, max_new_tokens=512, token_budget=8192),
}
DEFAULT_VARIANTS = {"tiny": list(VARIANTS), "qwen3-42m": ["float-full"]}  # qwen3-42m: ~10 min a process on 2 cores


class StepMeter(L.Callback):
    """Measures the training step with index ``measure``: its time, memory by phase and loss.

    Phases are the module's own (:class:`~infgrpo.runtime.memory.PhaseMemory`: the rollout and
    the update, both in ``training_step``; the clock starts at ``on_train_batch_start``).
    """

    def __init__(self, measure: int = 1) -> None:
        self.measure, self.result = measure, {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:  # noqa: ANN001
        """At step ``measure``: starts the resident-memory timeline and the clock (the rollout comes next)."""
        self.active, self.first = batch_idx == self.measure, batch_idx == 0
        if self.active:
            self.rss = RSSTimeline().__enter__()
            self.start = time.perf_counter()

    def on_after_backward(self, trainer, pl_module) -> None:  # noqa: ANN001
        """In the first step: the norm of the gradient accumulated so far (the last call sees all of it).

        The first step is the one where both log-prob paths start from the same weights and draw the same
        rollout; later ones differ by float32 rounding that Adam's first steps amplify (``lr * sign(g)``).
        """
        if self.first:
            grads = [p.grad.detach().double().square().sum() for p in pl_module.parameters() if p.grad is not None]
            self.result["first_grad_norm"] = float(sum(grads)) ** 0.5

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        """In the first step: the logged loss, to compare the log-prob paths (see :meth:`on_after_backward`)."""
        if batch_idx == 0 and "train/loss" in trainer.callback_metrics:
            self.result["first_loss"] = float(trainer.callback_metrics["train/loss"])
        self._measured_end(trainer, pl_module, batch_idx)

    def _measured_end(self, trainer, pl_module, batch_idx: int) -> None:  # noqa: ANN001
        """At step ``measure``: puts times, memory by phase and the logged loss into ``result``."""
        if batch_idx != self.measure:
            return
        self.result["step_time_s"] = time.perf_counter() - self.start
        self.rss.__exit__()
        phases = pl_module.phase_memory
        for phase in ("rollout", "update"):
            start, end = phases.windows[phase]
            rise, base = self.rss.rise(start, end)
            self.result[f"{phase}_time_s"] = end - start
            self.result[f"rss_{phase}_rise_bytes"] = rise
            self.result[f"rss_before_{phase}_bytes"] = base
            if phase in phases.peak_allocated:  # CUDA
                self.result[f"cuda_{phase}_peak_allocated_bytes"] = phases.peak_allocated[phase]
                self.result[f"cuda_{phase}_peak_reserved_bytes"] = phases.peak_reserved[phase]
                self.result[f"cuda_{phase}_rise_bytes"] = phases.rise(phase)
        if phases.peak_allocated:
            self.result["cuda_peak_allocated_bytes"] = max(phases.peak_allocated.values())
            self.result["cuda_peak_reserved_bytes"] = max(phases.peak_reserved.values())
        metrics = trainer.callback_metrics
        for key in (
            "loss", "update/token_budget", "micro_batches", "completion_length", "rollout/decode_steps",
            "rollout/logprob_mismatch_mean", "rollout/logprob_mismatch_max",
        ):  # fmt: skip
            if f"train/{key}" in metrics:
                self.result[key.split("/")[-1]] = float(metrics[f"train/{key}"])
        rollout = pl_module.last_step.rollouts.stats if pl_module.last_step is not None else None
        if rollout:
            self.result["generated_tokens"] = rollout["generated_tokens"]
            self.result["rollout_wall_s"] = rollout["wall_time_s"]
            self.result["graph_captures"] = rollout.get("graph_captures", 0)
            self.result["graph_fallback"] = rollout.get("graph_fallback", "")


def recipe_kwargs(
    config: str | Path = "configs/qwen3.yaml", model: str = "tiny", prompts: int = 1, **overrides: Any
) -> tuple[dict, dict]:
    """(GRPOModule kwargs, PromptDataModule kwargs) of a YAML recipe's ``model`` section, made to run offline.

    The model is replaced by ``model`` (a folder from :func:`save_bench_model`, or ``tiny``), the
    data by ``prompts`` prompts of the tiny synthetic task a step, the rewards by ``synthetic``; the
    output folder and completion tables are dropped. ``overrides``: a mapping for a group updates the
    recipe's fields of that group (``update={"token_budget": "auto"}``, ``sampler={"num_slots": 4}``); any
    other value replaces a top-level one (``group_size=4``).
    """
    import yaml

    section = {
        k: dict(v) if isinstance(v, dict) else v for k, v in yaml.safe_load(Path(config).read_text())["model"].items()
    }
    section.setdefault("policy", {})["model_name_or_path"] = model
    section.update(rewards={"functions": {"synthetic": 1.0}, "accuracy": "synthetic"}, output_dir=None)
    section.setdefault("logging", {})["log_completions_every_n_steps"] = 0
    for key, value in overrides.items():
        if isinstance(value, dict):
            section[key] = {**section.get(key, {}), **value}
        else:
            section[key] = value
    return section, dict(path="tiny", tokenizer=model, batch_size=prompts, eval_split=None)


def measure_step(module_kwargs: dict, data_kwargs: dict, measure: int = 1, seed: int = 0) -> dict:
    """One GRPO step of ``GRPOModule(**module_kwargs)`` on ``PromptDataModule(**data_kwargs)``, measured.

    Seeds everything with ``seed`` (LoRA's initial weights are random), runs ``measure + 1`` Lightning
    steps (the earlier ones pay one-time initialization) on the default accelerator and returns, for
    step ``measure``:
    ``step_time_s``, ``rollout_time_s``, ``update_time_s``; ``loss``, ``token_budget``,
    ``micro_batches``, ``completion_length``, ``logprob_mismatch_mean`` / ``_max`` (the rollout's log-probs
    against the update's, where the decoder reports them) (as logged); ``first_loss`` and ``first_grad_norm`` (of
    step 0, where two configurations start equal); ``rss_rollout_rise_bytes``,
    ``rss_update_rise_bytes`` (resident memory, on any device); on CUDA also
    ``cuda_rollout_peak_allocated_bytes``, ``cuda_update_peak_allocated_bytes``,
    ``cuda_rollout_peak_reserved_bytes``, ``cuda_update_peak_reserved_bytes``, ``cuda_rollout_rise_bytes``,
    ``cuda_update_rise_bytes`` (peak above the phase's start), ``cuda_peak_allocated_bytes`` and
    ``cuda_peak_reserved_bytes`` (the larger phase); plus ``rss_after_load_bytes``,
    ``trainable_params`` and ``device``.
    """
    from infgrpo import GRPOModule
    from infgrpo.data import PromptDataModule

    L.seed_everything(seed, verbose=False)
    module = GRPOModule(**module_kwargs)
    loaded_rss = psutil.Process().memory_info().rss
    meter = StepMeter(measure)
    trainer = L.Trainer(
        max_steps=measure + 1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[meter],
    )
    trainer.fit(module, PromptDataModule(**data_kwargs))
    result = {
        **meter.result,
        "rss_after_load_bytes": loaded_rss,
        "trainable_params": sum(p.numel() for p in module.policy.parameters() if p.requires_grad),
        "device": "cuda" if torch.cuda.is_available() else "cpu",
    }
    if torch.cuda.is_available():
        result["gpu"] = torch.cuda.get_device_name()
    return result


def run_one(cfg: dict) -> dict:
    """One configuration, in this process (the child of :func:`~benchmarks.harness.spawn`): :func:`measure_step`."""
    with tempfile.TemporaryDirectory() as tmp:
        model = save_bench_model(cfg["model"], Path(tmp) / cfg["model"])
        module_kwargs = dict(
            policy={"model_name_or_path": model},
            group_size=cfg["group_size"],
            rewards={"accuracy": "synthetic"},
            update=dict(
                token_budget=cfg["token_budget"], logit_chunk_tokens=cfg["logit_chunk_tokens"],
                num_iterations=cfg.get("num_iterations", 1),
            ),
            threads=threads_setting(cfg.get("threads")),
            sampler=dict(num_slots=cfg["num_slots"], max_new_tokens=cfg["max_new_tokens"]),
            **VARIANTS[cfg["variant"]],
        )  # fmt: skip
        data_kwargs = dict(path="tiny", tokenizer=model, batch_size=cfg["prompts"], eval_split=None)
        return {**cfg, **measure_step(module_kwargs, data_kwargs)}


def configs(args: argparse.Namespace) -> list[dict]:
    """Every (variant, log-prob path) with the model's defaults where the command line gives none."""
    defaults = MODEL_DEFAULTS.get(args.model, MODEL_DEFAULTS["qwen3-42m"])
    shared = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in defaults.items()}
    if shared["token_budget"] != "auto":
        shared["token_budget"] = int(shared["token_budget"])
    return [
        dict(model=args.model, variant=variant, logit_chunk_tokens=chunk, **shared)
        | dict(num_iterations=args.num_iterations, threads=args.threads)
        for variant in args.variants or DEFAULT_VARIANTS.get(args.model, list(VARIANTS))
        for chunk in args.logit_chunk_tokens
    ]


def run(args: argparse.Namespace) -> dict:
    """Each configuration in a fresh process: ``{"rows": [...]}``."""
    return {"rows": spawn_all("step", configs(args), timeout=args.timeout)}


def phase_table(rows: list[dict]) -> str:
    """Per configuration the memory rise of each phase, the update's over the full path's (same variant), the
    first step's loss and gradient norm, the token budget and micro-batches, and times."""
    cuda = any("cuda_update_rise_bytes" in r for r in rows)
    unit = "CUDA peak rise MiB" if cuda else "RSS rise MiB"
    rollout, update = (f"{'cuda' if cuda else 'rss'}_{phase}_rise_bytes" for phase in ("rollout", "update"))

    def vs_full(r: dict) -> str:
        full = [x for x in rows if x["variant"] == r["variant"] and x["logit_chunk_tokens"] == 0 and "skipped" not in x]
        return ratio(r[update], full[0][update]) if full else ""

    columns: list[Column] = [
        ("variant", cell("variant")),
        ("logit_chunk_tokens", lambda r: "full" if r["logit_chunk_tokens"] == 0 else f"{r['logit_chunk_tokens']:,}"),
        ("trainable params", cell("trainable_params", ",")),
        (f"rollout {unit}", lambda r: mib(r[rollout])),
        (f"update {unit}", lambda r: mib(r[update])),
        ("update vs full", vs_full),
        ("first step: loss", lambda r: f"{r.get('first_loss', float('nan')):.8g}"),
        ("gradient norm", lambda r: f"{r.get('first_grad_norm', float('nan')):.7g}"),
        ("token budget", lambda r: f"{int(r.get('token_budget', 0)):,}"),
        ("micro-batches", lambda r: int(r.get("micro_batches", 0))),
        ("rollout s", cell("rollout_time_s", ".2f")),
        ("update s", cell("update_time_s", ".2f")),
    ]
    return markdown_table(columns, rows, keys=2)


def whole_step_table(rows: list[dict]) -> str:
    """Rows of the issue #3 benchmark (``rss_rise_bytes``: the whole step as one figure), as it printed them."""
    base = [r for r in rows if r["variant"] == "float-full" and "skipped" not in r]
    columns: list[Column] = [
        ("variant", cell("variant")),
        ("trainable params", cell("trainable_params", ",")),
        ("RSS after load MiB", lambda r: mib(r["rss_after_load_bytes"])),
        ("step memory rise MiB", lambda r: mib(r.get("cuda_peak_bytes", r["rss_rise_bytes"]))),
        ("step time s", cell("step_time_s", ".2f")),
        ("time vs float-full", lambda r: ratio(r["step_time_s"], base[0]["step_time_s"]) if base else ""),
    ]
    return markdown_table(columns, rows, keys=1)


def tables(result: dict) -> str:
    """The phase table (rows of benchmarks/step_tiny.json and step_42m.json predate it: the whole-step table)."""
    rows = result["rows"]
    return whole_step_table(rows) if any("rss_rise_bytes" in r for r in rows) else phase_table(rows)


def add_args(ap: argparse.ArgumentParser) -> None:
    """The step benchmark's own arguments."""
    ap.add_argument("--model", default="tiny", help="tiny or qwen3-42m (or qwen3-1.7b-shape, a local folder)")
    ap.add_argument("--variants", nargs="+", default=None, help="default: tiny all, qwen3-42m float-full")
    ap.add_argument(
        "--logit-chunk-tokens", nargs="+", type=int, default=[DEFAULT_LOGIT_CHUNK_TOKENS, 0], help="0 = full logits"
    )
    ap.add_argument("--group-size", type=int, default=None, help="default: per model (tiny 8, qwen3-42m 16)")
    ap.add_argument("--prompts", type=int, default=None, help="default: per model (tiny 4, qwen3-42m 1)")
    ap.add_argument("--num-slots", type=int, default=None, help="default: per model (tiny 8, qwen3-42m 16)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: per model (tiny 64, qwen3-42m 512)")
    ap.add_argument("--token-budget", default=None, help="default: per model (tiny 4096, qwen3-42m 8192); or auto")
    ap.add_argument("--num-iterations", type=int, default=1, help="mu (with 2 the logged loss is the 2nd iteration's)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per configuration before skipping it")


BENCH = Benchmark("step", __doc__, add_args, run, tables, run_one=run_one, threads=0)


def main(argv: list[str] | None = None) -> list[dict]:
    """Runs each configuration in a fresh process, prints the table, writes ``--json`` and returns the rows."""
    return BENCH.main(argv).get("rows", [])


if __name__ == "__main__":
    main()
