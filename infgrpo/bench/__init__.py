"""Benchmarks: ``python -m infgrpo.bench <name> [--json PATH]``; each prints Markdown tables and writes JSON.

    python -m infgrpo.bench rollout --model tiny --json benchmarks/rollout_tiny.json
    python -m infgrpo.bench table benchmarks/rollout_tiny.json      # re-print a recorded table from its JSON

Every benchmark is a :class:`~infgrpo.bench.harness.Benchmark` (the shared ``main``: ``--json``,
``--threads`` with one meaning, one configuration per fresh process with a time box, the recorded
command) plus what is its own. Shared parts: :mod:`~infgrpo.bench.models` (the model-name table
``BENCH_MODELS`` and its stop-token rules), :mod:`~infgrpo.bench.memory` (``PeakRSS``, ``RSSTimeline``,
``mib``), :mod:`~infgrpo.bench.table` (``markdown_table``), :mod:`~infgrpo.bench.results` (JSON and
the fit run's CSV log).

How to add a benchmark: write ``infgrpo/bench/<name>.py`` with a docstring that says what it measures
and gives its command; ``add_args(ap)`` for its own arguments; ``run(args) -> dict``, which builds its
configurations and returns the result (for one configuration per fresh process: ``{"rows":
spawn_all("<name>", configs, timeout=...)}``, with ``run_one(cfg) -> dict`` measuring one configuration
in the child); ``tables(result) -> str``, which renders every table from the result alone with
``markdown_table(columns, rows, keys=...)`` (so ``python -m infgrpo.bench table`` re-prints it from
the JSON); then ``BENCH = Benchmark("<name>", __doc__, add_args, run, tables, run_one=run_one)`` and
``def main(argv=None): return BENCH.main(argv)``. Register the module below, and add a smoke test under
``tests/bench/`` that runs it shrunk.
"""

BENCHMARKS = {
    "train-tiny": "infgrpo.bench.train_tiny",
    "rollout": "infgrpo.bench.rollout",
    "step": "infgrpo.bench.step",
    "schedule": "infgrpo.bench.schedule",
    "decode-step": "infgrpo.bench.decode_step",
    "paper": "infgrpo.bench.paper",
    "busy-cpu": "infgrpo.bench.busy_cpu",
    "learn": "infgrpo.bench.learn",
    "update": "infgrpo.bench.update",
    "dynamic": "infgrpo.bench.dynamic",
    "skip": "infgrpo.bench.skip",
}
"""Benchmark name -> module (with ``main(argv)``, ``tables(result)`` and, if it spawns, ``run_one``)."""
