"""The rollout benchmark runs end to end (figures themselves are recorded in benchmarks/, not asserted)."""

import json

from infgrpo.bench.rollout import main


def test_rollout_benchmark_runs_each_decoder_in_a_fresh_process(tmp_path, capsys):
    out = tmp_path / "r.json"
    rows = main(
        [
            "--model",
            "tiny",
            "--group-sizes",
            "4",
            "--prompts",
            "2",
            "--num-slots",
            "4",
            "--max-new-tokens",
            "16",
            "--json",
            str(out),
        ]
    )
    assert [r["decoder"] for r in rows] == ["hf_full", "hf_micro", "engine"]
    assert all("skipped" not in r for r in rows)
    for r in rows:
        assert r["lower_bound_steps"] <= r["decode_steps"]
        assert r["generated_tokens"] > 0 and r["kv_bytes_peak"] > 0
    assert json.loads(out.read_text())["rows"] == rows
    assert "| 2 | 4 | engine | 4 |" in capsys.readouterr().out
