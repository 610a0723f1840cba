"""Run a benchmark by name, or re-print a recorded one's tables: ``python -m benchmarks <name> [options]``.

python -m benchmarks train-tiny --json benchmarks/train_tiny.json
python -m benchmarks table benchmarks/train_tiny.json
python -m benchmarks learn-merge a.json b.json --json all.json --png all.png   # learn runs of one job, one table
"""

from __future__ import annotations

import importlib
import sys

from benchmarks import BENCHMARKS

COMMANDS = {**BENCHMARKS, "table": "benchmarks.table", "learn-merge": "benchmarks.learn_merge"}


def main(argv: list[str] | None = None) -> None:
    """Runs the command named by ``argv[0]`` (default: the command line) with the arguments after it.

    Exits with the usage and the known names when the name is missing or unknown.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        names = ", ".join(COMMANDS)
        raise SystemExit(f"usage: python -m benchmarks <name> [options]; names: {names}")
    importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    main()
