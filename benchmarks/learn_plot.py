"""The figure of ``bench learn --png PATH``: each run's reward per step, and held-out accuracy before and after.

    write_png(result, "benchmarks/learn_smollm2.png")     # result: what bench learn returns (or its JSON)

Left: the reward of every step (thin) and its moving average (thick), one colour per run. Middle:
held-out greedy accuracy against the step, one line per run from the untrained model's (step 0) through
every evaluated adapter (``--eval-every``) to the last, the last value written beside it. Right (when the
evaluations carry their training seconds): the same against training minutes. Last (``chain_sum``): the final
held-out accuracy by kind of answer, one bar per run beside the untrained model's. matplotlib with
the Agg backend (no display needed; ``pip install -e ".[dev]"`` brings it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MOVING_AVERAGE = 5
"""Steps in the moving average of the reward curve (fewer at the start)."""


def moving_average(values: list[float], window: int = MOVING_AVERAGE) -> list[float]:
    """Mean of each value and the up to ``window - 1`` before it."""
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def accuracy_curve(row: dict, before: dict) -> list[dict]:
    """The run's evaluations that have an accuracy, by step: ``eval_curve`` when it has one, else before and after."""
    after = {**(row.get("eval") or {}), "step": len(row["per_step"])}
    curve = row.get("eval_curve") or [{**before, "step": 0}, after]
    return sorted((e for e in curve if "accuracy" in e), key=lambda e: e["step"])


def write_png(result: dict, path: str | Path) -> Path:
    """Draws the reward curves and the accuracies of ``result`` into the PNG ``path`` (its folder created)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if "skipped" not in r]
    timed = any(e.get("train_seconds") is not None for r in rows for e in r.get("eval_curve") or [])
    kinds = any((r.get("eval") or {}).get("accuracy_by") for r in rows)
    n = 2 + timed + kinds
    panels = plt.subplots(1, n, figsize=(5.7 * n, 4.5))[1]
    fig, curves, heldout = panels[0].figure, panels[0], panels[1]
    before = result.get("eval_before") or {}
    for i, row in enumerate(rows):
        colour = f"C{i}"
        steps = [s["step"] + 1 for s in row["per_step"]]
        rewards = [s["reward"] for s in row["per_step"]]
        curves.plot(steps, rewards, color=colour, alpha=0.35, linewidth=1)
        curves.plot(steps, moving_average(rewards), color=colour, linewidth=2.2, label=row["run"])
        points = [(e["step"], e["accuracy"]) for e in accuracy_curve(row, before)]
        if points:
            heldout.plot(*zip(*points, strict=True), color=colour, marker="o", linewidth=2, label=row["run"])
            heldout.annotate(f"{points[-1][1]:.3f}", points[-1], textcoords="offset points", xytext=(4, 4), fontsize=8)
    curves.set(xlabel="step", ylabel="mean reward of the step's completions", title="training reward")
    curves.legend(fontsize=8)
    curves.grid(alpha=0.3)
    if "accuracy" in before:
        where = (0, before["accuracy"])
        heldout.annotate(f"untrained {where[1]:.3f}", where, xytext=(4, -12), textcoords="offset points", fontsize=8)
    prompts = before.get("eval_prompts", "")
    heldout.set(xlabel="step", ylabel="accuracy", title=f"held-out greedy accuracy ({prompts} prompts)", ylim=(0, 1))
    heldout.grid(alpha=0.3)
    if timed:  # the same accuracies against the training minutes (the steps' seconds summed)
        clock = panels[2]
        for i, row in enumerate(rows):
            points = [
                (e["train_seconds"] / 60, e["accuracy"])
                for e in accuracy_curve(row, before)
                if e.get("train_seconds") is not None
            ]
            if points:
                clock.plot(*zip(*points, strict=True), color=f"C{i}", marker="o", linewidth=2, label=row["run"])
                clock.annotate(
                    f"{points[-1][1]:.3f}", points[-1], textcoords="offset points", xytext=(4, 4), fontsize=8
                )
        clock.set(
            xlabel="training minutes (steps' seconds)", ylabel="accuracy", title="held-out accuracy against the clock"
        )
        clock.set_ylim(0, 1)
        clock.grid(alpha=0.3)
        clock.legend(fontsize=8)
    if kinds:
        by_kind(panels[-1], result.get("eval_before") or {}, rows)
    job = result.get("job", {})
    fig.suptitle(
        f"{job.get('model')} on {job.get('task')}: {job.get('prompts')} prompts x G={job.get('group_size')}, "
        f"{job.get('max_new_tokens')} tokens, {job.get('steps')} steps",
        fontsize=10,
    )
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def by_kind(axes: Any, before: dict, rows: list[dict]) -> None:
    """Bars of the final held-out accuracy by kind of answer: the untrained model (grey), then each run."""
    evals = [("untrained", before, "0.6")] + [(r["run"], r.get("eval") or {}, f"C{i}") for i, r in enumerate(rows)]
    evals = [e for e in evals if e[1].get("accuracy_by")]
    kinds = list(dict.fromkeys(k for _, e, _ in evals for k in e["accuracy_by"]))
    width = 0.8 / len(evals)
    for j, (name, e, colour) in enumerate(evals):
        heights = [e["accuracy_by"][k][0] / e["accuracy_by"][k][1] if k in e["accuracy_by"] else 0.0 for k in kinds]
        where = [i + (j - (len(evals) - 1) / 2) * width for i in range(len(kinds))]
        axes.bar(where, heights, width, color=colour, label=name)
    axes.set_xticks(range(len(kinds)), [f"{k} ({evals[0][1]['accuracy_by'].get(k, [0, 0])[1]})" for k in kinds])
    axes.set(ylabel="accuracy", title="held-out accuracy by kind of answer, after training", ylim=(0, 1))
    axes.grid(alpha=0.3, axis="y")
    axes.legend(fontsize=7)
