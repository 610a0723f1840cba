"""The zero-advantage skip on a real job: the update's seconds with and without it, from the same state.

    python -m benchmarks skip --config configs/smollm2-cpu.yaml --steps 10 --json benchmarks/skip_smollm2.json
    python -m benchmarks skip --config configs/tiny.yaml --steps 2          # the wiring, in seconds

The recipe's ``GRPOModule`` and data (``--config``'s ``model`` and ``data`` sections, one thread) train for
``--steps`` steps by hand (no Lightning loop): each step draws the recipe's batch, one rollout, scores and
advantages, then runs **both** updates from the same parameters and optimizer state: one with
``update.skip_zero_advantage`` on (the recipe continues from its result) and one with every row (``off``),
in alternating order. Per step: the share of rows skipped (advantage exactly 0), each update's seconds,
and the largest relative difference of the parameters the two left (float32 rounding: the skip changes
which rows share a micro-batch, so sums run in another order; the float64 tests show the equality).
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import torch

from benchmarks.harness import Benchmark
from benchmarks.table import markdown_table, ratio


def add_args(ap: argparse.ArgumentParser) -> None:
    """The recipe and the number of steps."""
    ap.add_argument("--config", default="configs/smollm2-cpu.yaml", help="a recipe: its model and data sections")
    ap.add_argument("--steps", type=int, default=10)


def build(config: str) -> tuple:
    """The recipe's module (skip on) and set-up data module, from the YAML file (offline sources only)."""
    import yaml

    from infgrpo import GRPOModule
    from infgrpo.data import PromptDataModule

    recipe = yaml.safe_load(Path(config).read_text())
    model = dict(recipe["model"], output_dir=None, threads=1)
    model["update"] = {**model.get("update", {}), "skip_zero_advantage": "auto"}
    model["logging"] = {"log_completions_every_n_steps": 0}
    module = GRPOModule(**model)
    data_kw = dict(recipe.get("data", {}))
    data_kw.setdefault("tokenizer", module.settings.policy.model_name_or_path)
    data = PromptDataModule(**data_kw)
    data.setup("fit")
    return module, data


def timed_update(module, updater, rollouts, advantages, opt) -> float:  # noqa: ANN001
    """Seconds of one update of ``module.policy`` with ``updater`` (its optimizer step included)."""
    params = [p for p in module.policy.parameters() if p.requires_grad]
    clip = module.settings.optimizer.max_grad_norm

    def step() -> None:
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()

    start = time.perf_counter()
    updater.run(module.policy, rollouts, advantages, lambda x: x.backward(), step, lambda: opt.zero_grad(True))
    return time.perf_counter() - start


def run(args: argparse.Namespace) -> dict:
    """Both updates of every step from the same state; the recipe continues with the skip's."""
    from infgrpo.algo import ADVANTAGES

    torch.manual_seed(0)
    module, data = build(args.config)
    s = module.settings
    skipping = module.updater
    if not skipping.skip_zero_advantage:
        raise ValueError(f"{args.config}: the skip is not exact for its objective; nothing to compare")
    full = copy.copy(skipping)
    full.skip_zero_advantage = False
    trainable = [(n, p) for n, p in module.policy.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        [p for _, p in trainable], lr=s.optimizer.learning_rate, weight_decay=s.optimizer.weight_decay
    )
    order = torch.randperm(len(data.train_items), generator=torch.Generator().manual_seed(0)).tolist()
    rows = []
    for step in range(args.steps):
        batch = [
            data.train_items[i] for i in order[step * data.hparams.batch_size : (step + 1) * data.hparams.batch_size]
        ]
        rollouts = module.sampler.sample([b["prompt_ids"] for b in batch], s.group_size, seed=step)
        scores = module.scorer(rollouts, batch)
        adv = ADVANTAGES.get(s.objective.advantage)(scores.total, s.group_size, s.objective.scale_rewards)
        before = ({n: p.detach().clone() for n, p in trainable}, copy.deepcopy(opt.state_dict()))
        seconds, after = {}, {}
        for name in ["skip", "full"] if step % 2 == 0 else ["full", "skip"]:  # alternate: neither always first
            with torch.no_grad():
                for n, p in trainable:
                    p.copy_(before[0][n])
            opt.load_state_dict(copy.deepcopy(before[1]))
            seconds[name] = timed_update(module, skipping if name == "skip" else full, rollouts, adv, opt)
            after[name] = ({n: p.detach().clone() for n, p in trainable}, copy.deepcopy(opt.state_dict()))
        with torch.no_grad():  # the recipe continues from the skip's update
            for n, p in trainable:
                p.copy_(after["skip"][0][n])
        opt.load_state_dict(after["skip"][1])
        moved = max((after["full"][0][n] - before[0][n]).abs().max().item() for n, _ in trainable)
        diff = max((after["skip"][0][n] - after["full"][0][n]).abs().max().item() for n, _ in trainable)
        scale = max(after["full"][0][n].abs().max().item() for n, _ in trainable)
        rows.append({
            "step": step, "rows": len(adv), "rows_skipped": int((adv == 0).sum()), "skip_s": seconds["skip"],
            "full_s": seconds["full"], "max_abs_diff": diff, "max_rel_diff": diff / scale, "max_update": moved,
        })  # fmt: skip
    return {"config": args.config, "rows": rows, "summary": summary(rows)}


def summary(rows: list[dict]) -> dict:
    """Over the steps: the skipped share, the seconds' ratio and the saving, the largest difference."""
    skipped, total = sum(r["rows_skipped"] for r in rows), sum(r["rows"] for r in rows)
    skip_s, full_s = sum(r["skip_s"] for r in rows), sum(r["full_s"] for r in rows)
    share = skipped / total if total else 0.0
    saving = 1 - skip_s / full_s if full_s else 0.0
    return {
        "skipped_share": share, "skip_s": skip_s, "full_s": full_s, "saving": saving,
        "saving_over_share": saving / share if share else None,
        "max_rel_diff": max(r["max_rel_diff"] for r in rows), "max_abs_diff": max(r["max_abs_diff"] for r in rows),
    }  # fmt: skip


def tables(result: dict) -> str:
    """Per step and the summary."""
    cols = [
        ("step", lambda r: r["step"]), ("rows skipped", lambda r: f"{r['rows_skipped']} of {r['rows']}"),
        ("update s, skip", lambda r: f"{r['skip_s']:.2f}"), ("update s, every row", lambda r: f"{r['full_s']:.2f}"),
        ("ratio", lambda r: ratio(r["skip_s"], r["full_s"])), ("max |diff|", lambda r: f"{r['max_abs_diff']:.2e}"),
        ("max |diff| / max |param|", lambda r: f"{r['max_rel_diff']:.2e}"),
        ("max |update|", lambda r: f"{r['max_update']:.2e}"),
    ]  # fmt: skip
    s = result["summary"]
    line = (
        f"skipped share of rows {s['skipped_share']:.1%}; update seconds {s['skip_s']:.1f} with the skip against "
        f"{s['full_s']:.1f} without: {s['saving']:.1%} fewer ({s['saving_over_share'] or 0:.2f}x the skipped share); "
        f"largest parameter difference {s['max_abs_diff']:.2e} ({s['max_rel_diff']:.2e} of the largest parameter)"
    )
    return markdown_table(cols, result["rows"]) + "\n\n" + line


BENCH = Benchmark("skip", __doc__, add_args, run, tables, threads=1)


def main(argv: list[str] | None = None) -> dict:
    """``python -m benchmarks skip``."""
    return BENCH.main(argv)
