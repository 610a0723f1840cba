"""Benchmarks: ``python -m benchmarks <name> [--json PATH]``; each prints Markdown tables and writes JSON.

    python -m benchmarks rollout --model tiny --json benchmarks/rollout_tiny.json
    python -m benchmarks table benchmarks/rollout_tiny.json      # re-print a recorded table from its JSON

This package is a folder of the repository, beside the results it writes (``RESULTS.md`` and the JSON
files), and not part of the installed ``infgrpo`` wheel: run it from the root of a checkout (``python -m``
finds it there), with ``infgrpo`` installed or on ``PYTHONPATH``. ``trl`` (``learn``'s baseline) is imported by
:mod:`~benchmarks.learn_trl` alone, and matplotlib (``learn --png``) inside :mod:`~benchmarks.learn_plot`'s
function; ``learn`` imports both modules only inside the functions that use them, so every other benchmark
(and ``learn --trainers infgrpo``) runs without them.

Every benchmark is a :class:`~benchmarks.harness.Benchmark` (the shared ``main``: ``--json``,
``--threads`` with one meaning, one configuration per fresh process with a time box, the recorded
command) plus what is its own. Shared parts: :mod:`~benchmarks.models` (the model-name table
``BENCH_MODELS`` and its stop-token rules), :mod:`~benchmarks.memory` (``PeakRSS``, ``RSSTimeline``,
``mib``), :mod:`~benchmarks.table` (``markdown_table``), :mod:`~benchmarks.results` (JSON and
the fit run's CSV log).

How to add a benchmark: write ``benchmarks/<name>.py`` with a docstring that says what it measures
and gives its command; ``add_args(ap)`` for its own arguments; ``run(args) -> dict``, which builds its
configurations and returns the result (for one configuration per fresh process: ``{"rows":
spawn_all("<name>", configs, timeout=...)}``, with ``run_one(cfg) -> dict`` measuring one configuration
in the child); ``tables(result) -> str``, which renders every table from the result alone with
``markdown_table(columns, rows, keys=...)`` (so ``python -m benchmarks table`` re-prints it from
the JSON); then ``BENCH = Benchmark("<name>", __doc__, add_args, run, tables, run_one=run_one)`` and
``def main(argv=None): return BENCH.main(argv)``. Register the module below, and add a smoke test under
``tests/bench/`` that runs it shrunk.
"""

BENCHMARKS = {
    "train-tiny": "benchmarks.train_tiny",
    "rollout": "benchmarks.rollout",
    "step": "benchmarks.step",
    "schedule": "benchmarks.schedule",
    "decode-step": "benchmarks.decode_step",
    "paper": "benchmarks.paper",
    "busy-cpu": "benchmarks.busy_cpu",
    "learn": "benchmarks.learn",
    "update": "benchmarks.update",
    "agent": "benchmarks.agent",
    "dynamic": "benchmarks.dynamic",
    "skip": "benchmarks.skip",
    "adaptive": "benchmarks.adaptive",
    "adaptive-memory": "benchmarks.adaptive_memory",
    "reward-model": "benchmarks.reward_model",
    "sharded-memory": "benchmarks.sharded_memory",
    "vlm": "benchmarks.vlm",
    "vlm-learn": "benchmarks.vlm_learn",
}
"""Benchmark name -> module (with ``main(argv)``, ``tables(result)`` and, if it spawns, ``run_one``)."""
