"""Markdown tables rendered from a benchmark's rows, and the command that re-prints them from JSON.

    python -m benchmarks table benchmarks/rollout_tiny.json [more.json ...]

Every table a benchmark prints is :func:`markdown_table` over the rows it writes to JSON (its
``tables(result)`` function), so the JSON alone re-prints it. This command reads each file, finds the
benchmark that wrote it (the first word of its ``benchmark`` field, or the name after
``python -m benchmarks`` in its ``command``; ``python -m infgrpo.bench`` in files recorded before the
benchmarks left the package) and prints that benchmark's ``tables(result)``. A benchmark whose older
files lack a field that its tables need fills it in ``from_file(result, path)``.
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import BENCHMARKS
from benchmarks.results import read_json

Column = tuple[str, Callable[[dict], Any]]
"""(header, the cell of a row): the cell is printed with ``str``, so a function returns it formatted."""


def cell(key: str, spec: str = "") -> Callable[[dict], str]:
    """The cell ``format(row[key], spec)``: ``cell("tokens_per_s", ".0f")``."""
    return lambda r: format(r[key], spec)


def ratio(numerator: float, denominator: float | None) -> str:
    """``numerator / denominator`` to two decimals, or '' when there is no (positive) denominator."""
    return f"{numerator / denominator:.2f}" if denominator is not None and denominator > 0 else ""


def markdown_table(columns: Sequence[Column], rows: Iterable[dict], keys: int = 0) -> str:
    """A Markdown table: the headers, ``|---|`` per column, then one line per row.

    A row with a ``skipped`` field (a configuration that did not run: over its time box, failed, or left
    out) shows its first ``keys`` cells (the columns that name the configuration, which every row has),
    then ``skipped: <reason>``, then empty cells up to the table's width.
    """
    if not 0 <= keys < len(columns):
        raise ValueError(f"keys={keys} is not valid for {len(columns)} columns; use 0 to {len(columns) - 1}")
    lines = ["| " + " | ".join(header for header, _ in columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        if "skipped" in r:
            cells = [str(fn(r)) for _, fn in columns[:keys]] + [f"skipped: {r['skipped']}"]
            cells += [""] * (len(columns) - len(cells))
        else:
            cells = [str(fn(r)) for _, fn in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def benchmark_of(result: Any, path: str | Path) -> str:
    """The name of the benchmark that wrote ``result`` (read from ``path``); a ValueError if it cannot tell."""
    name = ""
    if isinstance(result, dict):
        name = str(result.get("benchmark") or "").split(" ")[0]
        if not name:
            found = re.search(r"-m (?:benchmarks|infgrpo\.bench) (\S+)", str(result.get("command") or ""))
            name = found.group(1) if found else ""
    if name not in BENCHMARKS:
        raise ValueError(
            f"{path}: cannot tell which benchmark wrote it (benchmark {name!r}; it needs a 'benchmark' field or a "
            f"'command' of the form 'python -m benchmarks <name> ...'); valid names: {', '.join(BENCHMARKS)}"
        )
    return name


def render(path: str | Path) -> str:
    """The tables of the benchmark JSON in ``path``, as that benchmark printed them."""
    result = read_json(path)
    module = importlib.import_module(BENCHMARKS[benchmark_of(result, path)])
    if hasattr(module, "from_file"):
        result = module.from_file(result, Path(path))
    return module.tables(result)


def main(argv: list[str] | None = None) -> list[str]:
    """Prints the tables of each JSON file named on the command line (its path above it when there are several)."""
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks table", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("paths", nargs="+", metavar="PATH", help="JSON files written by a benchmark's --json")
    args = ap.parse_args(argv)
    texts = [render(path) for path in args.paths]
    for path, text in zip(args.paths, texts, strict=True):
        print(f"{path}:\n\n{text}\n" if len(texts) > 1 else text)
    return texts


if __name__ == "__main__":
    main()
