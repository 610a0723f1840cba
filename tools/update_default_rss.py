"""Resident memory of the update by token_budget on configs/smollm2-cpu.yaml's job (issue #29, item 10).

    HF_HUB_OFFLINE=1 python tools/update_default_rss.py default,4096,512,256 benchmarks/tools/update_default_rss.json

Each budget in a fresh process: ``benchmarks.step.measure_step`` runs two Lightning steps of the recipe's
``GRPOModule`` (its model, LoRA, sampler, rewards and data; one thread) and measures the second (resident-memory
rise within the rollout's and the update's windows). ``default``: the recipe without its ``token_budget``, so
``UpdateConfig``'s default applies.
"""

import json
import subprocess
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout: benchmarks/ is a folder there, not installed
KEYS = ("token_budget", "micro_batches", "rss_update_rise_bytes", "rss_before_update_bytes", "rss_rollout_rise_bytes")


def child(budget: str) -> dict:
    """The measured step of the recipe with ``budget`` (``default``, ``auto`` or an integer), in this process."""
    import yaml

    from benchmarks.step import measure_step

    recipe = yaml.safe_load(Path("configs/smollm2-cpu.yaml").read_text())
    model = {k: v for k, v in recipe["model"].items() if k not in ("output_dir", "logging")}
    model["threads"], model["update"] = 1, dict(model["update"])
    if budget == "default":
        model["update"].pop("token_budget", None)
    else:
        model["update"]["token_budget"] = budget if budget == "auto" else int(budget)
    return {"setting": budget, **measure_step(model, dict(recipe["data"]), measure=1, seed=0)}


def main(budgets: str, out: str) -> None:
    """Each of the comma-separated ``budgets`` in a fresh process; the rows to ``out`` (JSON)."""
    rows = []
    for budget in budgets.split(","):
        run = subprocess.run([sys.executable, __file__, "--child", budget], capture_output=True, text=True)
        lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            raise RuntimeError(f"{budget}: {run.stderr[-2000:]}")
        rows.append(json.loads(lines[0].removeprefix("RESULT ")))
        print(budget, {k: rows[-1].get(k) for k in KEYS}, flush=True)
    command = f"HF_HUB_OFFLINE=1 python tools/update_default_rss.py {budgets} {out}"
    Path(out).write_text(json.dumps({"command": command, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        print("RESULT " + json.dumps(child(sys.argv[2])))
    else:
        main(sys.argv[1], sys.argv[2])
