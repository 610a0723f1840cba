"""One ``bench learn`` result from several recorded on the same job: one table and one figure of every run.

    python -m benchmarks learn-merge a.json b.json --json all.json --png all.png

Runs of one job are often recorded in several commands (one per core, side by side, or at different hours).
This command checks that every file is a ``learn`` result of the same job (every field of ``job``: model,
task, seed, steps, minutes, held-out size, ...) evaluated on the same held-out prompts by the same untrained
model, then writes one result: the first file's ``job`` and ``eval_before``, every file's ``rows`` in the order
given, ``same_job`` recomputed over all of them, and ``merged_from`` (each file's path and recorded
``command``, which rerun it). Its ``benchmark`` is ``learn``, so ``python -m benchmarks table all.json``
re-prints it; ``--png`` draws every run in one figure (:func:`~benchmarks.learn_plot.write_png`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness import recorded_command
from benchmarks.learn_tables import same_job, tables
from benchmarks.results import read_json, write_json

JOB_DEFAULTS = {"format": "infgrpo", "recipe": "none"}
"""Job fields added after some results were recorded: a result without one ran with this value."""
UNTRAINED_KEYS = ("accuracy", "accuracy_by", "eval_prompts", "eval_prompts_sha")
"""The untrained evaluation's fields that must agree: the same model on the same held-out prompts, greedy."""


def merge(results: Sequence[dict], paths: Sequence[str]) -> dict:
    """One learn result holding the rows of ``results`` (read from ``paths``); a ValueError naming the file
    and the field where one was not recorded on the first one's job."""
    if not results:
        raise ValueError("learn-merge needs at least one JSON file")
    first, base = results[0], paths[0]
    for result, path in zip(results, paths, strict=True):
        if result.get("benchmark") != "learn":
            raise ValueError(f"{path}: benchmark {result.get('benchmark')!r} is not 'learn'; only learn results merge")
        job, first_job = JOB_DEFAULTS | result["job"], JOB_DEFAULTS | first["job"]
        for key in sorted(set(job) | set(first_job)):
            if job.get(key) != first_job.get(key):
                raise ValueError(
                    f"{path}: job.{key}={job.get(key)!r} but {base} has {first_job.get(key)!r}: "
                    "only runs of the same job merge"
                )
        for key in UNTRAINED_KEYS:
            if result["eval_before"].get(key) != first["eval_before"].get(key):
                raise ValueError(
                    f"{path}: the untrained evaluation's {key} differs from {base}'s: not the same held-out prompts"
                )
    rows = [row for result in results for row in result["rows"]]
    sources = [{"path": str(p), "command": r["command"]} for r, p in zip(results, paths, strict=True)]
    merged = {
        "job": first["job"],
        "eval_before": first["eval_before"],
        "rows": rows,
        "same_job": same_job(rows),
        "merged_from": sources,
    }
    data = [r.get("data") for r in results]
    if any(d != data[0] for d in data):
        raise ValueError("the files were written from different --format trl data (their 'data' hashes differ)")
    if data[0]:
        merged["data"] = data[0]
    return merged


def parser() -> argparse.ArgumentParser:
    """The command's arguments: the files, ``--json``, ``--png``."""
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks learn-merge", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("paths", nargs="+", metavar="PATH", help="JSON files written by 'python -m benchmarks learn'")
    ap.add_argument("--json", default=None, metavar="PATH", help="write the merged result here")
    ap.add_argument("--png", default=None, metavar="PATH", help="draw every run in one figure here")
    return ap


def main(argv: Sequence[str] | None = None) -> dict:
    """Merges the files named on the command line, prints the tables, writes ``--json`` and ``--png``."""
    args = parser().parse_args(argv)
    merged = merge([read_json(p) for p in args.paths], args.paths)
    command = recorded_command("learn-merge", list(sys.argv[1:] if argv is None else argv))
    result = {"benchmark": "learn", "command": command, **merged}
    if args.png:
        from benchmarks.learn_plot import write_png

        result["png"] = str(write_png(result, Path(args.png)))
    print(tables(result))
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
