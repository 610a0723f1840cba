"""learn-merge: runs of one job recorded by several commands become one result, table and figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.learn_merge import main
from benchmarks.table import render

RECORDED = Path(__file__).parents[2] / "benchmarks"
SEED0 = [RECORDED / "learn_smollm2_adaptive_seed0.json", RECORDED / "learn_smollm2_adaptive2_seed0.json"]


def test_two_recorded_commands_of_one_job_merge_into_one_table_that_reprints_from_its_json(tmp_path, capsys):
    out = tmp_path / "all.json"
    main([str(p) for p in SEED0] + ["--json", str(out), "--png", str(tmp_path / "all.png")])
    sources = [json.loads(p.read_text()) for p in SEED0]
    merged = json.loads(out.read_text())
    assert [r["run"] for r in merged["rows"]] == [r["run"] for s in sources for r in s["rows"]]
    assert [m["command"] for m in merged["merged_from"]] == [s["command"] for s in sources]
    assert merged["job"] == sources[0]["job"] and merged["command"].startswith("python -m benchmarks learn-merge ")
    printed = capsys.readouterr().out
    assert render(out) == printed.rstrip("\n")  # the table command re-prints it as printed
    assert all(r["run"] in printed for r in merged["rows"]) and (tmp_path / "all.png").stat().st_size > 0


def test_runs_of_another_job_are_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"job\.seed=1 but .* has 0: only runs of the same job merge"):
        main([str(SEED0[0]), str(RECORDED / "learn_smollm2_adaptive_seed1.json")])
