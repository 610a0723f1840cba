"""The skeleton every benchmark shares: its arguments, threads, one configuration per fresh process, JSON.

    BENCH = Benchmark("rollout", __doc__, add_args, run, tables, run_one=run_one)

    def main(argv=None):
        return BENCH.main(argv)

:meth:`Benchmark.main` parses the benchmark's own arguments and the shared ones, applies ``--threads``,
calls ``run(args)`` for the result (a dict), puts ``benchmark`` and the recorded ``command`` in front of
it, prints ``tables(result)`` and writes ``--json``. The shared arguments:

- ``--json PATH``: the result as JSON; ``python -m benchmarks table PATH`` re-prints its tables.
- ``--threads N``: torch CPU threads, with one meaning in every benchmark that has it: **0 = infgrpo's
  auto policy** (:mod:`infgrpo.runtime.threads`: decided before each rollout and update from the work
  size and the cores other processes leave free), **N >= 1 = exactly N** (``auto`` is accepted for 0).
  It applies to the process that measures: this one, or each child of :func:`spawn` (the benchmark
  copies ``args.threads`` into each configuration's ``threads``). Each benchmark keeps the default its
  recorded figures were measured with.
- ``--one CFG`` (hidden): the child side of :func:`spawn`.

:func:`spawn` runs one configuration (a JSON-able dict) in a fresh Python process,
``python -m benchmarks <name> --one CFG``, under a time box: the child applies ``cfg["threads"]``,
runs ``run_one(cfg)`` and prints its result as the last line of stdout. The child keeps this working
directory, and the checkout's root is added to its ``PYTHONPATH`` (``benchmarks`` is a folder of the
checkout, not an installed package). A child over its time box, or one that fails, comes back as
``{**cfg, "skipped": reason}`` (for a failure, the last line of its stderr), which
:func:`~benchmarks.table.markdown_table` shows as a skipped row. A fresh process a configuration keeps
one configuration's memory (peak RSS, the CUDA allocator, lazy initializations) out of the next one's
figures.

The recorded command is ``python -m benchmarks <name> <the arguments as given>``, shell-quoted, so it
runs as written from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.results import write_json
from infgrpo.runtime.threads import Threads, check_threads, set_threads

THREADS_HELP = (
    "torch CPU threads: 0 (or 'auto') = infgrpo's auto policy (infgrpo.runtime.threads: from the work size and "
    "the cores other processes leave free, before each rollout and update), N >= 1 = exactly N"
)
CHECKOUT = Path(__file__).resolve().parents[1]
"""The repository root: ``benchmarks`` is a folder of the checkout, not an installed package."""
MIN_BOX_S = 5.0
"""A configuration is not started with less than this many seconds left of its time box."""


def threads_arg(text: str) -> int:
    """``--threads`` on the command line: 'auto' or 0 -> 0, an integer N >= 1 -> N."""
    if text.strip().lower() == "auto":
        return 0
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"--threads={text!r} is not valid; use 0 or 'auto' (auto policy) or N >= 1")
    return n


def threads_setting(threads: int | None) -> Threads:
    """``--threads`` as infgrpo's setting: 0 (or None, in rows recorded before the flag had one meaning) -> 'auto'."""
    return "auto" if not threads else check_threads(threads, "threads")


def apply_threads(threads: int | None) -> None:
    """Sets this process's thread policy from a ``--threads`` value (see :func:`threads_setting`)."""
    set_threads(threads_setting(threads))


def recorded_command(name: str, argv: Sequence[str]) -> str:
    """``python -m benchmarks <name> <argv>``, shell-quoted: the command that reruns this benchmark as written."""
    return "python -m benchmarks " + shlex.join([name, *argv])


def child_env() -> dict[str, str]:
    """This process's environment with :data:`CHECKOUT` at the end of ``PYTHONPATH`` (if it is not there yet)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(CHECKOUT) not in paths:
        paths.append(str(CHECKOUT))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def spawn(name: str, cfg: dict, timeout: float | None = None) -> dict:
    """Runs ``cfg`` with benchmark ``name``'s ``run_one`` in a fresh Python process; returns its result.

    Over ``timeout`` seconds the child is killed and ``{**cfg, "skipped": "over <timeout> s"}`` returned;
    a child that fails (or prints no result) gives ``{**cfg, "skipped": "failed: <last line of stderr>"}``.
    """
    cmd = [sys.executable, "-m", "benchmarks", name, "--one", json.dumps(cfg)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env())
    except subprocess.TimeoutExpired:
        return {**cfg, "skipped": f"over {timeout:g} s"}
    out = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and out:
        try:
            return json.loads(out[-1])
        except json.JSONDecodeError:
            return {**cfg, "skipped": f"failed: no JSON result, last line: {out[-1][:160]}"}
    tail = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit status {proc.returncode}, no output"]
    return {**cfg, "skipped": f"failed: {tail[0][:200]}"}


def spawn_all(
    name: str, configs: Sequence[dict], timeout: float | None = None, deadline: float | None = None
) -> list[dict]:
    """:func:`spawn` of each configuration in turn; each result is also printed as one JSON line to stderr.

    A configuration that already carries ``skipped`` (left out by the benchmark) is kept as it is. With a
    ``deadline`` (``time.monotonic()`` seconds) each child gets at most the time left, and none starts with
    less than :data:`MIN_BOX_S` left (``skipped: time box spent``).
    """
    rows = []
    for cfg in configs:
        if "skipped" in cfg:
            rows.append(cfg)
            continue
        box = timeout
        if deadline is not None:
            left = deadline - time.monotonic()
            if left < MIN_BOX_S:
                rows.append({**cfg, "skipped": "time box spent"})
                continue
            box = left if timeout is None else min(timeout, left)
        rows.append(spawn(name, cfg, box))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def run_child(one: str, run_one: Callable[[dict], dict]) -> dict:
    """The child side of :func:`spawn`: applies ``cfg["threads"]``, runs ``run_one`` and prints its JSON line."""
    cfg = json.loads(one)
    apply_threads(cfg.get("threads"))
    result = run_one(cfg)
    print(json.dumps(result), flush=True)
    return result


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: what ``python -m benchmarks <name>`` runs (see the module docstring)."""

    name: str
    """As on the command line: ``python -m benchmarks <name>``."""
    doc: str
    """Its ``--help`` text (the module docstring)."""
    add_args: Callable[[argparse.ArgumentParser], None]
    """Adds the benchmark's own arguments."""
    run: Callable[[argparse.Namespace], dict]
    """The parsed arguments (with ``command``, and ``extra`` if ``extra_args``) -> the result, a JSON-able dict."""
    tables: Callable[[dict], str]
    """The result (as written to JSON, or read back) -> the Markdown tables printed."""
    run_one: Callable[[dict], dict] | None = None
    """One configuration, in this process (the child of :func:`spawn`); None if the benchmark spawns none."""
    threads: int | None = 0
    """The default of ``--threads``; None: no ``--threads`` (the benchmark sets threads another way)."""
    extra_args: bool = False
    """Arguments the parser does not know go to ``args.extra`` instead of an error."""

    def parser(self) -> argparse.ArgumentParser:
        """The benchmark's arguments and the shared ones."""
        ap = argparse.ArgumentParser(
            prog=f"python -m benchmarks {self.name}",
            description=self.doc,
            formatter_class=argparse.RawTextHelpFormatter,
        )
        self.add_args(ap)
        json_help = "write the result here (its tables re-print with: python -m benchmarks table PATH)"
        ap.add_argument("--json", default=None, metavar="PATH", help=json_help)
        if self.threads is not None:
            ap.add_argument(
                "--threads", type=threads_arg, default=self.threads, help=f"{THREADS_HELP} (default: {self.threads})"
            )
        if self.run_one is not None:
            ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
        return ap

    def main(self, argv: Sequence[str] | None = None) -> dict:
        """Runs the benchmark on ``argv`` (default: the command line); returns the result (``{}`` in a child)."""
        argv = list(sys.argv[1:] if argv is None else argv)
        if self.extra_args:
            args, extra = self.parser().parse_known_args(argv)
            args.extra = extra
        else:
            args = self.parser().parse_args(argv)
        if self.run_one is not None and args.one:
            run_child(args.one, self.run_one)
            return {}
        if self.threads is not None:
            apply_threads(args.threads)
        args.command = recorded_command(self.name, argv)
        result = {"benchmark": self.name, "command": args.command, **self.run(args)}
        print(self.tables(result))
        write_json(args.json, result)
        return result
