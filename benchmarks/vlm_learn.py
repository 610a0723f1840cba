"""Benchmark: held-out accuracy of a config's GRPO run before training and at each validation, by kind of question.

    python -m benchmarks vlm-learn --json benchmarks/vlm_learn_tiny_vl.json      # configs/vlm-tiny.yaml as it is
    python -m benchmarks vlm-learn --config configs/vlm-tiny.yaml --trainer.max_steps 40   # overrides go to fit

The run is built exactly as ``python -m infgrpo.fit --config CONFIG [overrides]`` builds it
(:func:`infgrpo.fit.make_cli`: the same parser, preflight, seeds, module, data module and trainer). Before it fits,
the untrained policy answers the held-out prompts through the validation path itself (the module's evaluation
sampler and scorer, the data module's held-out batches with their images); then the trainer fits, validating every
``trainer.val_check_interval`` steps as the config says, and the trained policy answers again. The result: held-out
accuracy before and after, overall and by each row's ``kind`` (the shapes task: ``colours``, ``count``); for the
shapes task, the share of answers that are right, the task's flawed answer (what the warm start imitates) or
anything else, by kind and number of shapes; the curve of ``val/accuracy`` and ``train/reward`` from the run's CSV
log; the fit's wall seconds and the machine's load average; and ``final_validation_equal``: the last validation's
accuracy equals the after-scoring's (one path).
Threads are the config's (``--model.threads 1`` passes through).
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.harness import Benchmark
from benchmarks.table import Column, cell, markdown_table
from infgrpo.assets.shapes import KINDS
from infgrpo.evaluation import accuracy_by
from infgrpo.fit import make_cli
from infgrpo.runtime.threads import adapt_threads
from infgrpo.vision.inputs import batch_visions


def flawed_answer(answer: str, kind: str) -> str:
    """The shapes task's flawed answer to a row (:meth:`infgrpo.assets.shapes.Scene.flawed`), from its right answer."""
    if kind == "colours":
        colours = answer.split()
        return " ".join(colours[:-1] if len(colours) > 1 else colours * 2)
    n = int(answer)
    return str(n - 1 if n > 1 else 2)


def shapes(meta: dict) -> int:
    """The number of shapes in a shapes-task row's image, from its answer."""
    return int(meta["answer"]) if meta["kind"] == "count" else len(meta["answer"].split())


def heldout(module, data) -> dict:  # noqa: ANN001 - GRPOModule, PromptDataModule
    """One greedy answer per held-out prompt through the validation step's path (its sampler, scorer and batches):
    the accuracy, right answers ``by_kind``, and for the shapes task the share of answers that are right, the task's
    flawed answer, or anything else, by kind and number of shapes (``answers``: ``{"count 3": [right, flawed,
    other]}``)."""
    accuracy = module.settings.rewards.accuracy
    values, items, texts = [], [], []
    with torch.no_grad():
        for batch in data.val_dataloader():
            adapt_threads(module.eval_sampler.model, rows=len(batch))  # as score_heldout
            out = module.eval_sampler.generate_one(
                [it["prompt_ids"] for it in batch], batch_size=len(batch), vision=batch_visions(batch)
            )
            values.append(module.scorer(out, batch).parts[accuracy])
            texts += module.tokenizer.batch_decode(out.completion_ids, skip_special_tokens=True)
            items += batch
    right = torch.cat(values)
    result = {"accuracy": float((right >= 1).float().mean()), "prompts": len(items)}
    result["by_kind"] = accuracy_by(items, right, lambda meta: str(meta.get("kind", "all")))
    if all(it["meta"].get("kind") in KINDS and "answer" in it["meta"] for it in items):  # the shapes task
        answers: dict[str, list[int]] = {}
        for it, text in zip(items, texts, strict=True):
            meta, said = it["meta"], text.strip()
            which = 0 if said == meta["answer"] else 1 if said == flawed_answer(meta["answer"], meta["kind"]) else 2
            answers.setdefault(f"{meta['kind']} {shapes(meta)}", [0, 0, 0])[which] += 1
        result["answers"] = dict(sorted(answers.items()))
    return result


def curve(log_dir: Path) -> tuple[list[dict], list[dict]]:
    """(validations ``[{"step", "accuracy"}]``, training steps ``[{"step", "reward"}]``) from the CSV log; steps are
    counted from 1 (the log's ``step`` is the optimizer step's index from 0)."""
    with (log_dir / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    val = [{"step": int(r["step"]) + 1, "accuracy": float(r["val/accuracy"])} for r in rows if r.get("val/accuracy")]
    train = [{"step": int(r["step"]) + 1, "reward": float(r["train/reward"])} for r in rows if r.get("train/reward")]
    return val, train


def run(args: argparse.Namespace) -> dict:
    """Builds the fit run of ``args.config`` and ``args.extra``, scores the held-out prompts, fits, scores again."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as root:
        cli = make_cli(["--config", args.config, "--trainer.default_root_dir", root, *args.extra])
        module, data, trainer = cli.model, cli.datamodule, cli.trainer
        data.setup("fit")
        before = heldout(module, data)
        load = os.getloadavg()[0]
        start = time.perf_counter()
        trainer.fit(module, data)
        wall = time.perf_counter() - start
        after = heldout(module, data)
        validations, train = curve(Path(trainer.logger.log_dir))
    last = validations[-1]["accuracy"] if validations else None
    return {
        "config": args.config,
        "overrides": args.extra,
        "max_steps": trainer.max_steps,
        "eval_prompts": before["prompts"],
        "accuracy_before": before["accuracy"],
        "accuracy_after": after["accuracy"],
        "gain_points": 100 * (after["accuracy"] - before["accuracy"]),
        "by_kind_before": before["by_kind"],
        "by_kind_after": after["by_kind"],
        "answers_before": before.get("answers"),
        "answers_after": after.get("answers"),
        "validations": validations,
        "train_reward": train,
        "final_validation_equal": last is not None and abs(last - after["accuracy"]) < 1e-6,
        "fit_wall_time_s": wall,
        "load_average_1min": [load, os.getloadavg()[0]],
        "cpu_threads": os.cpu_count(),
    }


def tables(result: dict) -> str:
    """Accuracy before and after (overall, by kind), the validation curve, the wall time and the machine's load."""
    rows = [{"kind": "all", "before": result["accuracy_before"], "after": result["accuracy_after"]}]
    for kind, (right, n) in result["by_kind_before"].items():
        got, m = result["by_kind_after"][kind]
        rows.append({"kind": f"{kind} ({n} prompts)", "before": right / n, "after": got / m})
    columns: list[Column] = [("kind", cell("kind")), ("before", cell("before", ".3f")), ("after", cell("after", ".3f"))]
    steps = [{"step": 0, "accuracy": result["accuracy_before"]}, *result["validations"]]
    curve_columns: list[Column] = [("step", cell("step")), ("held-out accuracy", cell("accuracy", ".3f"))]
    load = ", ".join(f"{x:.1f}" for x in result["load_average_1min"])
    shares = ""
    if result.get("answers_before"):  # the shapes task: right / flawed / other, by kind and number of shapes

        def split(counts: list[int]) -> str:
            return " / ".join(f"{c / sum(counts):.2f}" for c in counts)

        answers = [
            {"rows": f"{key} ({sum(b)})", "before": split(b), "after": split(result["answers_after"][key])}
            for key, b in result["answers_before"].items()
        ]
        share_columns: list[Column] = [
            ("kind, shapes (prompts)", cell("rows")),
            ("before: right / flawed / other", cell("before")),
            ("after", cell("after")),
        ]
        shares = f"\n\n{markdown_table(share_columns, answers)}"
    return (
        f"## held-out accuracy (greedy, {result['eval_prompts']} prompts), {result['max_steps']} steps: "
        f"{result['gain_points']:+.1f} points\n\n{markdown_table(columns, rows)}\n\n"
        f"{markdown_table(curve_columns, steps)}{shares}\n\nfit wall time: {result['fit_wall_time_s']:.0f} s "
        f"(1-minute load average before and after: {load}); the last validation equals the after-scoring: "
        f"{result['final_validation_equal']}"
    )


def add_args(ap: argparse.ArgumentParser) -> None:
    """The benchmark's own argument (the ones it does not know go to the fit command)."""
    ap.add_argument("--config", default="configs/vlm-tiny.yaml")


BENCH = Benchmark("vlm-learn", __doc__, add_args, run, tables, threads=None, extra_args=True)

main = BENCH.main  # main(argv=None) -> the result: what --json writes

if __name__ == "__main__":
    main()
