"""The figure of ``bench learn --png PATH``: each run's reward per step, and held-out accuracy before and after.

    write_png(result, "benchmarks/learn_smollm2.png")     # result: what bench learn returns (or its JSON)

Left: the reward of every step (thin) and its moving average (thick), one colour per run. Right:
held-out greedy accuracy, the untrained model's bar and each run's after training. matplotlib with
the Agg backend (no display needed; ``pip install -e ".[dev]"`` brings it).
"""

from __future__ import annotations

from pathlib import Path

MOVING_AVERAGE = 5
"""Steps in the moving average of the reward curve (fewer at the start)."""


def moving_average(values: list[float], window: int = MOVING_AVERAGE) -> list[float]:
    """Mean of each value and the up to ``window - 1`` before it."""
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def write_png(result: dict, path: str | Path) -> Path:
    """Draws the reward curves and the accuracies of ``result`` into the PNG ``path`` (its folder created)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if "skipped" not in r]
    fig, (curves, bars) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [2, 1]})
    names, accuracy = [], []
    before = result.get("eval_before") or {}
    if "accuracy" in before:
        names.append("untrained")
        accuracy.append(before["accuracy"])
    for i, row in enumerate(rows):
        colour = f"C{i}"
        steps = [s["step"] + 1 for s in row["per_step"]]
        rewards = [s["reward"] for s in row["per_step"]]
        curves.plot(steps, rewards, color=colour, alpha=0.35, linewidth=1)
        curves.plot(steps, moving_average(rewards), color=colour, linewidth=2.2, label=row["run"])
        if "accuracy" in (row.get("eval") or {}):
            names.append(row["run"])
            accuracy.append(row["eval"]["accuracy"])
    curves.set(xlabel="step", ylabel="mean reward of the step's completions", title="training reward")
    curves.legend(fontsize=8)
    curves.grid(alpha=0.3)
    colours = ["0.6"] * ("accuracy" in before) + [
        f"C{i}" for i, r in enumerate(rows) if "accuracy" in (r.get("eval") or {})
    ]
    bars.bar(range(len(names)), accuracy, color=colours)
    for x, a in enumerate(accuracy):
        bars.text(x, a, f"{a:.3f}", ha="center", va="bottom", fontsize=8)
    bars.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    prompts = before.get("eval_prompts", "")
    bars.set(
        ylabel="accuracy", title=f"held-out greedy accuracy ({prompts} prompts)", ylim=(0, max(accuracy + [0.05]) * 1.2)
    )
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
