"""Run a benchmark by name: ``python -m infgrpo.bench <name> [options]``.

python -m infgrpo.bench train-tiny --json benchmarks/train_tiny.json
"""

from __future__ import annotations

import sys

BENCHMARKS = {
    "train-tiny": "infgrpo.bench.train_tiny",
    "rollout": "infgrpo.bench.rollout",
    "step": "infgrpo.bench.step",
    "schedule": "infgrpo.bench.schedule",
    "decode-step": "infgrpo.bench.decode_step",
    "paper": "infgrpo.bench.paper",
    "busy-cpu": "infgrpo.bench.busy_cpu",
}


def main(argv: list[str] | None = None) -> None:
    """Runs the benchmark named by ``argv[0]`` (default: the command line) with the arguments after it.

    Exits with the usage and the known names when the name is missing or unknown.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in BENCHMARKS:
        names = ", ".join(BENCHMARKS)
        raise SystemExit(f"usage: python -m infgrpo.bench <name> [options]; names: {names}")
    import importlib

    importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    main()
