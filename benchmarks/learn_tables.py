"""The tables of ``bench learn``, rendered from its result alone (``python -m benchmarks table`` re-prints them).

print(tables(result))     # summary, held-out curve by step and by training seconds, settings, steps
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

from benchmarks.memory import mib
from benchmarks.table import Column, markdown_table


def same_job(rows: list[dict]) -> dict[str, Any]:
    """Whether every run that ran trained on the same prompts (text and token ids) and completions each step,
    over the steps all of them ran (``--minutes`` stops them at different steps). Dynamic sampling's runs train
    on the prompts they choose, so they are not compared."""
    ran = [r for r in rows if "skipped" not in r and "dynamic" not in (r.get("variant") or "")]
    if not ran:
        return {"same": False, "runs": 0, "steps": 0, "first_difference": None}
    common = min(len(r["per_step"]) for r in ran)
    proof = [[(s["prompts_sha"], s["prompt_ids_sha"], s["completions"]) for s in r["per_step"][:common]] for r in ran]
    diff = next(((i, r["run"]) for i, r in enumerate(ran) if proof[i] != proof[0]), None)
    where = None
    if diff is not None:
        other = proof[diff[0]]
        step = next(
            (k for k, (a, b) in enumerate(zip(proof[0], other, strict=False)) if a != b), min(len(proof[0]), len(other))
        )
        where = {"step": step, "runs": [ran[0]["run"], diff[1]]}
    return {"same": diff is None, "runs": len(ran), "steps": len(proof[0]), "first_difference": where}


def mean_after_first(row: dict, key: str) -> float:
    """Mean of ``key`` over the steps after the first (NaN with one step)."""
    values = [s[key] for s in row["per_step"][1:]]
    return statistics.mean(values) if values else math.nan


def fmt(x: float | None, spec: str) -> str:
    """``x`` formatted, or — when it is missing or NaN."""
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def summary_table(result: dict) -> str:
    """Per run: seconds per step (first, mean after), its split, rewards, accuracy after training, memory."""
    rows = result["rows"]
    cuda = any("cuda_max_allocated_bytes" in r for r in rows)

    def reward(r: dict, part: slice) -> str:
        values = [s["reward"] for s in r["per_step"][part] if not math.isnan(s["reward"])]
        return fmt(statistics.mean(values) if values else None, ".3f")

    columns: list[Column] = [
        ("run", lambda r: r["run"]),
        ("steps", lambda r: len(r["per_step"])),
        ("first step s", lambda r: fmt(r["per_step"][0]["seconds"], ".1f")),
        ("s / step (after first)", lambda r: fmt(mean_after_first(r, "seconds"), ".1f")),
        ("rollout s", lambda r: fmt(mean_after_first(r, "rollout_s"), ".1f")),
        ("update s", lambda r: fmt(mean_after_first(r, "update_s"), ".1f")),
        ("reward, first 10 steps", lambda r: reward(r, slice(0, 10))),
        ("reward, last 10 steps", lambda r: reward(r, slice(-10, None))),
        ("held-out accuracy after", lambda r: fmt((r.get("eval") or {}).get("accuracy"), ".3f")),
        ("peak RSS MiB", lambda r: mib(r["rss_peak_bytes"])),
        ("RSS rise MiB", lambda r: mib(r["rss_rise_bytes"])),
    ]
    if cuda:
        columns += [
            ("CUDA max allocated MiB", lambda r: mib(r.get("cuda_max_allocated_bytes", 0))),
            ("CUDA max reserved MiB", lambda r: mib(r.get("cuda_max_reserved_bytes", 0))),
        ]
    before = result.get("eval_before") or {}
    if "accuracy" in before:
        line = f"held-out greedy accuracy before training: {before['accuracy']:.3f} on {before['eval_prompts']} prompts"
    else:
        line = f"held-out accuracy before training: skipped ({before.get('skipped', 'not run')})"
    proof = result.get("same_job") or same_job(rows)
    if proof["same"]:
        done = f"{proof['runs']} runs, {proof['steps']} steps"
        same = f"same prompts (user turns and token ids) and completions every step in every run: yes ({done})"
    else:
        same = f"same prompts and completions every step in every run: NO ({proof['first_difference']})"
    return f"{markdown_table(columns, rows, keys=1)}\n\n{line}; {same}"


def settings_table(rows: list[dict]) -> str:
    """The matched settings as each run ended with them, and whether all runs agree."""
    ran = [r for r in rows if "matched" in r]
    if not ran:
        return ""
    keys = list(dict.fromkeys(k for r in ran for k in r["matched"]))
    table = [{"setting": k, **{r["run"]: r["matched"].get(k, "—") for r in ran}} for k in keys]
    for t in table:
        values = [json.dumps(t[r["run"]], default=str) for r in ran]
        t["same"] = "yes" if len(set(values)) == 1 else "**no**"
    columns: list[Column] = [("setting", lambda t: t["setting"])]
    columns += [(r["run"], lambda t, run=r["run"]: short(t[run])) for r in ran]
    return markdown_table([*columns, ("same", lambda t: t["same"])], table)


def short(value: Any) -> str:
    """A setting's value for a table cell (long lists shortened)."""
    if isinstance(value, list) and len(value) > 3:
        return f"{', '.join(map(str, value[:3]))}, … ({len(value)})"
    return str(value)


def steps_table(rows: list[dict]) -> str:
    """Reward and seconds of every step of every run."""
    ran = [r for r in rows if "per_step" in r]
    if not ran:
        return ""
    n = max(len(r["per_step"]) for r in ran)
    columns: list[Column] = [("step", lambda i: i + 1)]
    for r in ran:
        steps = r["per_step"]
        columns.append((f"{r['run']}: reward", lambda i, s=steps: fmt(s[i]["reward"], ".3f") if i < len(s) else ""))
        columns.append((f"{r['run']}: s", lambda i, s=steps: fmt(s[i]["seconds"], ".1f") if i < len(s) else ""))
    return markdown_table([(h, lambda row, f=f: f(row["i"])) for h, f in columns], [{"i": i} for i in range(n)])


def curve_table(rows: list[dict]) -> str:
    """Held-out greedy accuracy of each run after each evaluated step (``--eval-every``; step 0: untrained)."""
    ran = [r for r in rows if len(r.get("eval_curve") or []) > 2]
    if not ran:
        return ""
    steps = sorted({e["step"] for r in ran for e in r["eval_curve"]})
    columns: list[Column] = [("step", lambda row: row["step"])]
    for r in ran:
        at = {e["step"]: e.get("accuracy") for e in r["eval_curve"]}
        columns.append((f"{r['run']}: held-out accuracy", lambda row, at=at: fmt(at.get(row["step"]), ".3f")))
    return markdown_table(columns, [{"step": k} for k in steps])


def clock_table(rows: list[dict]) -> str:
    """Held-out greedy accuracy of each run against its training seconds (the sum of its steps' seconds; the
    evaluations' own time not counted): what a user waiting for a result compares."""
    ran = [r for r in rows if any(e.get("train_seconds") is not None for e in r.get("eval_curve") or [])]
    if not ran:
        return ""
    columns: list[Column] = [("run", lambda row: row["run"]), ("step", lambda row: row["step"])]
    columns += [("training minutes", lambda row: fmt(row["train_seconds"] / 60, ".1f"))]
    columns += [("held-out accuracy", lambda row: fmt(row.get("accuracy"), ".3f"))]
    points = [
        {"run": r["run"], **e}
        for r in ran
        for e in r["eval_curve"]
        if e.get("train_seconds") is not None and "step" in e
    ]
    return markdown_table(columns, points)


def reward_parts_table(rows: list[dict]) -> str:
    """Each reward's mean over the first 10 and the last 10 training steps of each run (per step: the mean over the
    step's completions), for runs with more than one reward (``--recipe boxed``: the format reward and accuracy)."""
    ran = [r for r in rows if any(len(s.get("rewards") or {}) > 1 for s in r.get("per_step") or [])]
    if not ran:
        return ""

    def mean(values: list[float]) -> float | None:
        kept = [v for v in values if not math.isnan(v)]
        return statistics.mean(kept) if kept else None

    table = [
        {"run": r["run"], "reward": name, "values": [s["rewards"][name] for s in r["per_step"]]}
        for r in ran
        for name in dict.fromkeys(n for s in r["per_step"] for n in s.get("rewards") or {})
    ]
    columns: list[Column] = [
        ("run", lambda t: t["run"]),
        ("reward", lambda t: t["reward"].rpartition(":")[2]),
        ("steps", lambda t: len(t["values"])),
        ("mean, first 10 steps", lambda t: fmt(mean(t["values"][:10]), ".3f")),
        ("mean, last 10 steps", lambda t: fmt(mean(t["values"][-10:]), ".3f")),
    ]
    return markdown_table(columns, table)


def kind_table(result: dict) -> str:
    """Held-out greedy accuracy by kind of answer (``accuracy_by``: chain_sum's kinds), untrained and after each run:
    right answers / prompts of the kind."""
    before = result.get("eval_before") or {}
    evals = [("untrained", before)] + [(r["run"], r.get("eval") or {}) for r in result["rows"]]
    evals = [{"run": name, "eval": e} for name, e in evals if e.get("accuracy_by")]
    if not evals:
        return ""
    kinds = list(dict.fromkeys(k for row in evals for k in row["eval"]["accuracy_by"]))

    def cell(e: dict, kind: str) -> str:
        right, n = e["accuracy_by"].get(kind, (0, 0))
        return f"{right / n:.3f} ({right}/{n})" if n else "—"

    columns: list[Column] = [("run", lambda row: row["run"])]
    columns += [("all", lambda row: fmt(row["eval"].get("accuracy"), ".3f"))]
    columns += [(kind, lambda row, kind=kind: cell(row["eval"], kind)) for kind in kinds]
    return markdown_table(columns, evals)


def tables(result: dict) -> str:
    """The summary, each reward's first and last steps (several rewards), accuracy by kind, the held-out curve, the
    matched settings and the per-step table, from the result alone."""
    rows = result["rows"]
    parts = [summary_table(result), reward_parts_table(rows), kind_table(result), curve_table(rows), clock_table(rows)]
    parts.append(settings_table(rows))
    parts.append(steps_table(rows))
    return "\n\n".join(p for p in parts if p)
