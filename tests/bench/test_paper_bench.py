"""The paper-scale suite and the decode-step counters run end to end on a CPU, shrunk (so they cannot rot)."""

import json

from infgrpo.bench import decode_step, paper


def test_paper_suite_small_runs_every_part_and_writes_each_json(tmp_path, capsys):
    parts = paper.main(["--small", "--model", "tiny", "--json-dir", str(tmp_path), "--threads", "1"])
    assert set(parts) == {"checks", "a", "b", "c"}
    assert parts["checks"][0]["skipped"] == "no CUDA device"  # the CUDA checks need a GPU
    for name in ("a", "b", "c"):
        assert all("skipped" not in r for r in parts[name]), parts[name]
        assert json.loads((tmp_path / f"paper_{name}.json").read_text())["rows"] == parts[name]
    decoders = [r["decoder"] for r in parts["a"]]
    assert decoders == ["engine", "engine", "hf_full", "hf_micro", "hf_cb"]
    assert parts["a"][-1]["slots_used"] == 8  # transformers' continuous batching, as many a forward as the engine
    for r in parts["a"] + parts["c"]:
        assert 0 < r["lower_bound_steps"] <= r["decode_steps"] and r["ms_per_step"] > 0
    engine_small, engine_big = parts["a"][:2]
    assert engine_big["slots_used"] == 8 and engine_small["slots_used"] == 4
    (step,) = parts["b"]
    assert step["decode_steps"] > 0 and step["rollout_time_s"] > 0 and step["update_time_s"] > 0
    assert step["generated_tokens"] >= step["group_size"]
    table = capsys.readouterr().out
    assert "| a | engine G=16 | 4 |" in table and "| b | GRPO step G=8 | 4 |" in table
    assert "| a | hf_cb G=16 | 8 |" in table and "| tok/s vs hf_cb | memory vs hf_cb |" in table
    assert "| checks | tiny | skipped: no CUDA device |" in table


def test_decode_step_counters_see_one_shape_and_no_random_or_scalar_calls(tmp_path):
    r = decode_step.main(["--model", "tiny", "--group-size", "24", "--num-slots", "12", "--max-new-tokens", "24"])
    assert r["decode_steps"] > 0 and r["num_slots"] == 12
    assert r["input_shapes"] == 1  # every decode step of the rollout has the pool's shape
    assert r["random_calls_per_step"] == 0  # uniforms come from the counter-based hash
    assert r["scalar_reads_per_step"] == 0  # nothing read back but the step's (S, 2) result
    assert 1.0 < r["ops_vs_bare_forward"] < 1.25  # the model's forward plus a bounded sampling tail


def test_the_suite_tables_render_cuda_rows_as_a_gpu_run_writes_them():
    base = dict(model="qwen3-1.7b-shape", prompts=1, group_size=32, num_slots=16, ms_per_step=5.0, decode_steps=90)
    base["peak_rss_delta_bytes"] = 2**30  # written on CUDA too; the tables show the CUDA peak there
    engine = dict(base, decoder="engine", slots_used=16, tokens_per_s=400.0, cuda_peak_bytes=10 * 2**20)
    full = dict(base, decoder="hf_full", slots_used=32, tokens_per_s=800.0, cuda_peak_bytes=40 * 2**20)
    step = dict(base, kind="step", decode_steps=100.0, rollout_time_s=2.0, update_time_s=3.0, generated_tokens=3000)
    step.update(cuda_peak_allocated_bytes=7.6e9, cuda_rollout_peak_allocated_bytes=4.5e9)
    step.update(cuda_update_peak_allocated_bytes=7.6e9, cuda_peak_reserved_bytes=9e9)
    checks = dict(model="qwen3-1.7b-shape", hash_cuda_equals_cpu=True, graph_captures=1, graph_equals_eager=True)
    checks["graph_logprob_max_abs_diff"] = 0.0
    lines = paper.tables({"parts": {"a": [engine, full], "b": [step], "checks": [checks]}}).splitlines()
    assert "| a | engine G=32 | 16 | 90 | 5.0 | 400 | 0.50 | 10.0 | 0.25 |" in lines
    assert (
        "| b | GRPO step G=32 | 16 | 100 | 20.0 | 1500 | 2.0 | 3.0 | "
        + ("rollout 4.50 / update 7.60 GB allocated, 9.00 GB reserved |")
        in lines
    )
    assert "| checks | qwen3-1.7b-shape | True | 1 | True | 0 |" in lines
    cb = dict(base, decoder="hf_cb", slots_used=16, tokens_per_s=200.0, cuda_peak_bytes=20 * 2**20)
    lines = paper.tables({"parts": {"a": [engine, full, cb]}}).splitlines()
    assert lines[0].endswith("| memory vs hf_full | tok/s vs hf_cb | memory vs hf_cb |")
    assert "| a | engine G=32 | 16 | 90 | 5.0 | 400 | 0.50 | 10.0 | 0.25 | 2.00 | 0.50 |" in lines
    assert "| a | hf_cb G=32 | 16 | 90 | 5.0 | 200 | 0.25 | 20.0 | 0.50 | 1.00 | 1.00 |" in lines
