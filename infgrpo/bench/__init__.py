"""Benchmarks: ``python -m infgrpo.bench <name> [--json PATH]``; each prints a table and writes JSON."""
