"""Runs the tutorials at full size, in place, and writes each one's measured time where the docs state it.

    python tools/run_tutorials.py              # every notebook of tutorials/, one after the other
    python tools/run_tutorials.py 01 06        # the notebooks whose names start with these
    python tools/run_tutorials.py --dry-run    # what it would run, and the times the docs state now

Each notebook runs from ``tutorials/`` in a fresh kernel with its full parameters (``INFGRPO_TUTORIAL_SMOKE=0``)
and ``HF_HUB_OFFLINE=1``, and its outputs are written back into the ``.ipynb``: those are the committed outputs.
Its wall time (kernel start to last cell) then goes into the notebook's first cell, the line that starts with
``**Time:**``, and into the time column of ``docs/tutorials.md``, with the commit it ran at; a table of every
notebook run is printed at the end. A notebook that fails keeps its file as it was and is reported; the exit
status is then 1. Run it on a quiet machine: the times are what a reader is promised (`pytest --nbmake` runs the
notebooks shrunk instead, and only checks that they run).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"
PAGE = ROOT / "docs" / "tutorials.md"
CORES = "2 CPU cores"
TIME_LINE = re.compile(r"^\*\*Time:\*\*.*$", re.MULTILINE)


def minutes(seconds: float) -> str:
    """``"about a minute"``, ``"about 3 minutes"``: what a reader plans around."""
    count = max(1, round(seconds / 60))
    return "about a minute" if count == 1 else f"about {count} minutes"


def time_line(seconds: float, commit: str) -> str:
    """A notebook's ``**Time:**`` line for a measured run."""
    return (
        f"**Time:** {minutes(seconds)} on {CORES} at the parameters below (measured: {seconds:.0f} s at commit "
        f"{commit}, `python tools/run_tutorials.py`)."
    )


def time_phrase(line: str) -> str:
    """The time a ``**Time:**`` line states, as docs/tutorials.md's time column shows it (``about 3 minutes``)."""
    match = re.match(r"\*\*Time:\*\* (about (?:a|\d+) minutes?)", line)
    if not match:
        raise ValueError(f"not a **Time:** line of tools/run_tutorials.py's form: {line!r}")
    return match[1]


def with_time_line(markdown: str, line: str) -> str:
    """A notebook's first cell with its ``**Time:**`` line replaced by ``line`` (exactly one must be there)."""
    if len(TIME_LINE.findall(markdown)) != 1:
        raise ValueError("the first cell must hold exactly one line that starts with **Time:**")
    return TIME_LINE.sub(lambda _: line, markdown)


def with_table_time(page: str, notebook: str, phrase: str) -> str:
    """docs/tutorials.md with the last cell of ``notebook``'s row set to ``phrase``."""
    row = re.compile(rf"^(\| \[`{re.escape(notebook)}`\].*\| )([^|]*)( \|)$", re.MULTILINE)
    if len(row.findall(page)) != 1:
        raise ValueError(f"docs/tutorials.md must hold exactly one row for {notebook}")
    return row.sub(lambda m: f"{m[1]}{phrase} on {CORES}{m[3]}", page)


def first_cell(path: Path) -> str:
    """The source of a notebook's first cell."""
    import nbformat

    return "".join(nbformat.read(path, as_version=4).cells[0].source)


def run(path: Path, timeout: int) -> float:
    """Executes ``path`` in place with its full parameters; returns the wall seconds. Raises if a cell fails."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    path_now = os.environ.get("PYTHONPATH")
    checkout = str(ROOT) + (os.pathsep + path_now if path_now else "")  # the kernel imports this checkout's infgrpo
    env = {
        "INFGRPO_TUTORIAL_SMOKE": "0",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": checkout,
    }
    os.environ.update(env)  # the kernel inherits this process's environment
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(TUTORIALS)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nbformat.write(notebook, path)
    return seconds


def record(path: Path, seconds: float, commit: str) -> None:
    """Writes the measured time into the notebook's first cell and docs/tutorials.md."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    line = time_line(seconds, commit)
    notebook.cells[0].source = with_time_line("".join(notebook.cells[0].source), line)
    nbformat.write(notebook, path)
    PAGE.write_text(with_table_time(PAGE.read_text(), path.stem, time_phrase(line)))


def main(argv: list[str] | None = None) -> int:
    """Runs the chosen notebooks, records their times, prints the table; 1 when one failed."""
    parser = argparse.ArgumentParser(prog="python tools/run_tutorials.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("prefixes", nargs="*", help="run only the notebooks whose names start with these (01, 06_)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds a cell may take (default: 3600)")
    parser.add_argument("--dry-run", action="store_true", help="list the notebooks and the times stated now")
    args = parser.parse_args(argv)
    paths = sorted(p for p in TUTORIALS.glob("*.ipynb") if not args.prefixes or p.stem.startswith(tuple(args.prefixes)))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    commit = commit.strip() or "unknown"
    rows, failed = [], False
    for path in paths:
        if args.dry_run:
            stated = TIME_LINE.search(first_cell(path))
            rows.append((path.stem, "-", stated[0] if stated else "no **Time:** line"))
            continue
        print(f"running {path.name} ...", flush=True)
        try:
            seconds = run(path, args.timeout)
        except Exception as error:  # noqa: BLE001 - a failing cell: report it, keep the committed file
            rows.append((path.stem, "failed", f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:200]}"))
            failed = True
            continue
        record(path, seconds, commit)
        rows.append((path.stem, f"{seconds:.0f}", minutes(seconds)))
    print(f"\n| notebook | seconds | time (on {CORES}, commit {commit}) |\n|---|---|---|")
    for name, seconds, what in rows:
        print(f"| {name} | {seconds} | {what} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
