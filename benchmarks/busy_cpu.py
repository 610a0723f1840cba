"""Benchmark: the tiny default's first steps on a quiet CPU and beside a process that keeps one core busy.

    python -m benchmarks busy-cpu [--steps 6] [--repeats 2] [--json PATH]

Each run is a fresh ``python -m infgrpo.fit --config configs/tiny.yaml --trainer.max_steps 6`` (so
torch's thread pool starts as a user's would), once with ``--model.threads <all cores>`` (torch's
default, what every run did before ``threads: auto``) and once with ``--model.threads auto``; each
both on a quiet machine and beside a spinning child process (one busy core, bounded: it stops by
itself after ``--busy-limit`` seconds, and is stopped when the run ends). The time of a run is the
sum of its steps' rollout and update seconds from the CSV log (model loading and imports left out);
the process's wall time is reported beside it. Runs alternate quiet / busy, so a change of the
machine's load from other users hits both. (No ``--threads`` here: ``--settings`` are the values of
``--model.threads`` compared.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import Benchmark
from benchmarks.results import logged_steps
from benchmarks.table import Column, cell, markdown_table
from infgrpo.runtime.threads import usable_cores

SPIN = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"


def busy_core(limit_s: float) -> subprocess.Popen:
    """A child process that keeps one core busy for at most ``limit_s`` seconds, then exits by itself."""
    return subprocess.Popen([sys.executable, "-c", SPIN.format(limit=limit_s)])


def step_seconds(root: Path) -> list[float]:
    """Rollout + update seconds of each logged step in the run's ``metrics.csv``."""
    return [float(r["train/time/rollout_s"]) + float(r["train/time/update_s"]) for r in logged_steps(root)]


def fit_run(config: str, steps: int, threads: str, busy: bool, busy_limit: float) -> dict:
    """One fresh fit process of ``steps`` steps; its summed step seconds and its wall time."""
    spinner = busy_core(busy_limit) if busy else None
    try:
        with tempfile.TemporaryDirectory() as root:
            cmd = [
                sys.executable, "-m", "infgrpo.fit", "--config", config,
                "--trainer.max_steps", str(steps), "--trainer.log_every_n_steps", "1",
                "--trainer.default_root_dir", root, "--trainer.enable_progress_bar", "false",
                "--model.threads", threads,
            ]  # fmt: skip
            start = time.perf_counter()
            env = {**os.environ, "HF_HUB_OFFLINE": "1"}
            done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            if done.returncode:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
            wall = time.perf_counter() - start
            per_step = step_seconds(Path(root))
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    if len(per_step) != steps:
        raise RuntimeError(f"expected {steps} logged steps, found {len(per_step)}")
    return {"threads": threads, "busy": busy, "steps_s": sum(per_step), "per_step_s": per_step, "wall_s": wall}


def run(args: argparse.Namespace) -> dict:
    """Runs the quiet / busy pairs for each ``--model.threads`` setting (default: all cores, then auto)."""
    cores = usable_cores()
    settings = args.settings or [str(cores), "auto"]
    runs = []
    for rep in range(args.repeats):
        for threads in settings:
            for busy in (False, True):
                run = fit_run(args.config, args.steps, threads, busy, args.busy_limit)
                runs.append(run)
                print(
                    f"repeat {rep} threads={threads:>4} {'busy ' if busy else 'quiet'}: {args.steps} steps "
                    f"{run['steps_s']:.1f} s (process {run['wall_s']:.1f} s)",
                    flush=True,
                )

    def median(threads: str, busy: bool) -> float:
        return statistics.median(r["steps_s"] for r in runs if r["threads"] == threads and r["busy"] == busy)

    today_quiet = median(str(cores), False)
    summary = {}
    for threads in settings:
        quiet, busy = median(threads, False), median(threads, True)
        summary[threads] = {"quiet_s": quiet, "busy_s": busy, "busy_over_quiet": busy / quiet,
                            "quiet_over_default_quiet": quiet / today_quiet}  # fmt: skip
    return {
        "config": args.config,
        "steps": args.steps,
        "repeats": args.repeats,
        "usable_cores": cores,
        "default_threads": cores,
        "summary": summary,
        "runs": runs,
        "loadavg_after": Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None,
    }


def tables(result: dict) -> str:
    """Per setting: median seconds quiet and beside a busy core, their ratio, and quiet over the default's quiet."""
    rows = [{"threads": threads, **figures} for threads, figures in result["summary"].items()]
    columns: list[Column] = [
        ("threads", cell("threads")),
        ("quiet s", cell("quiet_s", ".1f")),
        ("one core busy s", cell("busy_s", ".1f")),
        ("busy / quiet", cell("busy_over_quiet", ".2f")),
        ("quiet / today's quiet", cell("quiet_over_default_quiet", ".2f")),
    ]
    return markdown_table(columns, rows)


def add_args(ap: argparse.ArgumentParser) -> None:
    """The busy-cpu benchmark's own arguments."""
    ap.add_argument("--config", default="configs/tiny.yaml")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2, help="quiet/busy pairs per setting")
    ap.add_argument("--settings", nargs="+", default=None, help="--model.threads values (default: all cores, auto)")
    ap.add_argument("--busy-limit", type=float, default=600.0, help="the spinning child stops after this (s)")


BENCH = Benchmark("busy-cpu", __doc__, add_args, run, tables, threads=None)

main = BENCH.main  # main(argv=None) -> the result: what --json writes

if __name__ == "__main__":
    main()
