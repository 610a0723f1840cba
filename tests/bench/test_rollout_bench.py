"""The rollout benchmark runs end to end (figures themselves are recorded in benchmarks/, not asserted)."""

import json

import pytest

from benchmarks.rollout import decoder_table, main


@pytest.mark.slow  # over 20 s on a busy 2-core machine
def test_rollout_benchmark_runs_each_decoder_in_a_fresh_process_and_the_engine_at_each_decode_width(tmp_path, capsys):
    # one run, 4 child processes (the paper benchmark's part a runs hf_micro and the engine at two pool sizes)
    out = tmp_path / "r.json"
    args = ["--model", "tiny", "--group-sizes", "12", "--prompts", "2", "--num-slots", "8", "--max-new-tokens", "16"]
    argv = [*args, "--decoders", "hf_full", "engine", "hf_cb", "--decode-widths", "pool", "busy", "--threads", "1"]
    rows = main([*argv, "--json", str(out)])
    assert [(r["decoder"], r.get("decode_width")) for r in rows] == [
        ("hf_full", None), ("engine", "pool"), ("engine", "busy"), ("hf_cb", None),
    ]  # fmt: skip
    assert all("skipped" not in r for r in rows), rows
    for r in rows:
        assert r["lower_bound_steps"] <= r["decode_steps"]  # hf_cb: 8 sequences a forward, prefill steps included
        assert r["generated_tokens"] > 0 and r["kv_bytes_peak"] > 0
    assert json.loads(out.read_text())["rows"] == rows
    _, pool, busy, cb = rows
    # the same completions (the step's rows are computed alone), in the same decode steps
    assert (busy["generated_tokens"], busy["decode_steps"]) == (pool["generated_tokens"], pool["decode_steps"])
    assert cb["slots_used"] == 8
    table = capsys.readouterr().out.splitlines()
    assert any(line.startswith("| 2 | 12 | engine | pool |") for line in table)
    assert any(line.startswith("| 2 | 12 | hf_cb |") for line in table)
    assert table[0].startswith("| prompts | G | decoder | width |") and table[0].endswith("| tok/s vs pool width |")
    assert "| tok/s vs hf_cb | memory vs hf_cb |" in table[0]  # its ratio columns come with its rows


def test_the_decoder_table_shows_a_skipped_hf_cb_row_with_its_reason():
    base = dict(prompts=1, group_size=8, num_slots=4, slots_used=4, kv_bytes_peak=2**20, peak_rss_delta_bytes=2**21)
    base.update(decode_steps=10, lower_bound_steps=8, tokens_per_s=100.0, wall_time_s=1.0)
    reason = "hf_cb cannot run: attn_implementation='flex_attention': ..."
    rows = [dict(base, decoder="engine"), dict(base, decoder="hf_cb", skipped=reason)]
    lines = decoder_table(rows).splitlines()
    assert lines[0].endswith("| memory vs hf_cb |")
    assert lines[2] == "| 1 | 8 | engine | 4 | 1.0 | 2.0 | 10 | 8 | 100 | 1.00 |" + "  |" * 5  # nothing to compare with
    assert lines[3] == f"| 1 | 8 | hf_cb | skipped: {reason} |" + "  |" * 11  # 15 columns
