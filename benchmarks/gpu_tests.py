"""The CUDA-only tests as one row of a benchmark: ``pytest -m gpu tests/gpu`` in its own time box.

    row = run_gpu_tests(box_s=120, log="benchmarks/paper/paper_tests.log")
    # {"kind": "tests", "passed": 15, "failed": 0, "errors": 0, "skipped_tests": 0, "seconds": 41.2, "failures": []}

The tests run in a fresh process from the repository root (the checkout ``benchmarks/`` is part of),
with the project's pytest settings but none of its ``addopts`` (they name plugins a GPU machine may lack).
Counts and each failure's first line come from pytest's JUnit XML; pytest's whole output goes to
``log``. A run over its box is killed and comes back as ``skipped: over <box> s`` with what finished
before (from the verbose output), a run that cannot start as ``skipped: failed: ...``, and no
``tests/gpu`` beside ``benchmarks/`` (a partial copy of the checkout) or no pytest as a ``skipped`` row
that says so.
Without CUDA every test is skipped (``tests/conftest.py``), so the row counts them all in
``skipped_tests`` (``skipped`` is the field of a row that did not run, as in every benchmark).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1] / "tests" / "gpu"
"""Where the CUDA-only tests are: ``tests/gpu`` beside ``benchmarks/`` in the checkout."""
COMMAND = "python -m pytest -m gpu tests/gpu"
"""How the row names what ran."""
OUTCOMES = ("passed", "failed", "errors", "skipped_tests")
"""The row's counts of test cases."""


def pytest_command(tests: Path, junit: Path) -> list[str]:
    """The pytest command line: the tests marked ``gpu`` under ``tests``, verbose, JUnit XML into ``junit``."""
    return [
        sys.executable, "-m", "pytest", "-m", "gpu", str(tests), "-o", "addopts=", "-p", "no:cacheprovider",
        "-v", "-rfEs", "--tb=short", f"--junitxml={junit}",
    ]  # fmt: skip


def junit_counts(path: Path) -> dict:
    """Passed, failed, errors and skipped test cases in a JUnit XML file, and each failure's test and first line."""
    counts = dict.fromkeys(OUTCOMES, 0)
    failures = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        kind = {"failure": "failed", "error": "errors", "skipped": "skipped_tests"}.get(
            getattr(outcome, "tag", ""), "passed"
        )
        counts[kind] += 1
        if kind in ("failed", "errors"):
            message = (outcome.get("message") or outcome.text or "").strip().splitlines()
            test = f"{case.get('classname', '')}::{case.get('name', '')}"
            failures.append({"test": test, "message": message[0][:300] if message else ""})
    return {**counts, "failures": failures}


def verbose_counts(output: str) -> dict:
    """The outcomes pytest's verbose output shows so far (a run killed before it wrote its JUnit XML)."""
    found = re.findall(r"::\S+ (PASSED|FAILED|ERROR|SKIPPED)", output)
    names = dict(zip(("PASSED", "FAILED", "ERROR", "SKIPPED"), OUTCOMES, strict=True))
    return {v: sum(1 for f in found if names[f] == v) for v in OUTCOMES}


def text(stream: str | bytes | None) -> str:
    """A subprocess stream as text (a timeout hands it back as bytes)."""
    return stream.decode(errors="replace") if isinstance(stream, bytes) else stream or ""


def run_gpu_tests(box_s: float, log: str | Path | None = None, tests: Path = TESTS_DIR) -> dict:
    """Runs the tests under ``tests`` marked ``gpu`` within ``box_s`` seconds; the row (see the module docstring)."""
    row: dict = {"kind": "tests", "command": COMMAND}
    if not tests.is_dir():
        return {**row, "skipped": f"no {tests} beside the package (run from a checkout of the repository)"}
    if importlib.util.find_spec("pytest") is None:
        return {**row, "skipped": "pytest is not installed (carry its wheels: pytest, pluggy, iniconfig, packaging)"}
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        start = time.monotonic()
        try:
            proc = subprocess.run(
                pytest_command(tests, junit), cwd=tests.parents[1], capture_output=True, text=True, timeout=box_s
            )
            output, status = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as err:
            output, status = text(err.stdout) + text(err.stderr), None
        row["seconds"] = time.monotonic() - start
        counts = junit_counts(junit) if junit.exists() else None
    if log:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        Path(log).write_text(output)
    if status is None:
        return {**row, **verbose_counts(output), "skipped": f"over {box_s:g} s"}
    if counts is None:
        last = output.strip().splitlines()[-1:] or ["no output"]
        return {**row, "skipped": f"failed: pytest exit status {status}: {last[0][:200]}"}
    return {**row, **counts, "exit_status": status}


def summary(row: dict) -> list[str]:
    """Printed lines: the counts, then one line per failure."""
    counts = ", ".join(f"{row.get(k, 0)} {k.replace('_tests', '')}" for k in OUTCOMES)
    head = f"GPU tests ({row['command']}): "
    if "skipped" in row:
        return [head + f"did not finish: {row['skipped']}" + (f" (so far: {counts})" if "passed" in row else "")]
    seconds = f" in {row['seconds']:.0f} s" if "seconds" in row else ""
    return [head + counts + seconds] + [f"  FAILED {f['test']}: {f['message']}" for f in row.get("failures", [])]
