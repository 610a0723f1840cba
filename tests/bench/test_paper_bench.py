"""The paper-scale suite and the decode-step counters run end to end on a CPU, shrunk (so they cannot rot)."""

import json

import pytest

from benchmarks import decode_step, gpu_tests, paper


@pytest.mark.slow  # over 20 s on a busy 2-core machine
def test_paper_suite_small_runs_the_parts_in_the_order_given_and_writes_each_json(tmp_path, capsys, children_here):
    children_here(paper, paper.run_one)  # its 8 configurations here; the CUDA tests' pytest still runs apart
    argv = ["--small", "--model", "tiny", "--parts", "checks", "b", "a", "c", "--json-dir", str(tmp_path)]
    parts = paper.main([*argv, "--threads", "1"])
    out = capsys.readouterr().out
    assert list(parts) == ["checks", "b", "a", "c"]
    done = [line.split()[2] for line in out.splitlines() if line.startswith("[paper] part ")]
    assert done == ["checks", "b", "a", "c"]  # each part reported as it ends, in the order given
    tests, checks = parts["checks"]
    assert tests["kind"] == "tests" and tests["exit_status"] == 0  # pytest -m gpu tests/gpu ran first
    assert (tests["passed"], tests["failed"], tests["errors"]) == (0, 0, 0) and tests["skipped_tests"] >= 10
    assert "SKIPPED" in (tmp_path / "paper_tests.log").read_text()  # without CUDA every one is skipped
    assert f"0 passed, 0 failed, 0 errors, {tests['skipped_tests']} skipped" in out
    assert checks["skipped"] == "no CUDA device"  # the CUDA checks need a GPU
    for name in ("a", "b", "c"):
        assert all("skipped" not in r for r in parts[name]), parts[name]
    for name in parts:
        written = json.loads((tmp_path / f"paper_{name}.json").read_text())
        assert written["rows"] == parts[name] and written["complete"] is True
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
    # each decode step's graph captures and eager fallback, printed as its part ends (none on a CPU)
    assert "[paper]   GRPO step G=8: graph_captures 0, eager fallback: none" in out
    assert out.count("[paper]   engine G=16: graph_captures 0, eager fallback: none") == 2
    assert "hf_full G=16: graph_captures" not in out
    assert "| a | engine G=16 | 4 |" in out and "| b | GRPO step G=8 | 4 |" in out
    assert "| a | hf_cb G=16 | 8 |" in out and "| tok/s vs hf_cb | memory vs hf_cb |" in out
    assert "| checks | tiny | skipped: no CUDA device |" in out
    assert f"| checks | python -m pytest -m gpu tests/gpu | 0 | 0 | 0 | {tests['skipped_tests']} |" in out
    assert "| c | engine G=32 | 0 | none |" in out  # the CUDA-graph table


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
    checks.update(kind="checks", graph_logprob_max_abs_diff=0.0, graph_fallback="")
    tests = dict(kind="tests", passed=14, failed=1, errors=0, skipped_tests=0, seconds=40.2)
    tests["failures"] = [{"test": "tests.gpu.test_graph_capture_cuda::test_x[host read]", "message": "AssertionError"}]
    engine["graph_captures"], engine["graph_fallback"] = 0, "RuntimeError: operation not permitted"
    step.update(graph_captures=1, graph_fallback="")
    parts = {"a": [engine, full], "b": [step], "checks": [tests, checks]}
    lines = paper.tables({"parts": parts}).splitlines()
    assert "| a | engine G=32 | 16 | 90 | 5.0 | 400 | 0.50 | 10.0 | 0.25 |" in lines
    assert (
        "| b | GRPO step G=32 | 16 | 100 | 20.0 | 1500 | 2.0 | 3.0 | "
        + ("rollout 4.50 / update 7.60 GB allocated, 9.00 GB reserved |")
        in lines
    )
    assert "| checks | qwen3-1.7b-shape | True | 1 | True | 0 |" in lines
    failed = "test_graph_capture_cuda::test_x[host read]"
    assert f"| checks | python -m pytest -m gpu tests/gpu | 14 | 1 | 0 | 0 | 40 | {failed} |" in lines
    assert "| a | engine G=32 | 0 | RuntimeError: operation not permitted |" in lines  # an eager fallback shows
    assert "| b | GRPO step G=32 | 1 | none |" in lines and "| checks | graph == eager check | 1 | none |" in lines
    assert not [line for line in lines if line.startswith("| a | hf_full") and line.endswith("| none |")]
    report = paper.part_report("a", [engine, full], 12.0)
    assert report == [
        "[paper] part a done in 12 s: 2 of 2 rows ran",
        "[paper]   engine G=32: graph_captures 0, eager fallback: RuntimeError: operation not permitted",
    ]
    cb = dict(base, decoder="hf_cb", slots_used=16, tokens_per_s=200.0, cuda_peak_bytes=20 * 2**20)
    lines = paper.tables({"parts": {"a": [engine, full, cb]}}).splitlines()
    assert lines[0].endswith("| memory vs hf_full | tok/s vs hf_cb | memory vs hf_cb |")
    assert "| a | engine G=32 | 16 | 90 | 5.0 | 400 | 0.50 | 10.0 | 0.25 | 2.00 | 0.50 |" in lines
    assert "| a | hf_cb G=32 | 16 | 90 | 5.0 | 200 | 0.25 | 20.0 | 0.50 | 1.00 | 1.00 |" in lines


GPU_TESTS = """
import time

import pytest


@pytest.mark.gpu
def test_passes():
    assert True


@pytest.mark.gpu
def test_fails():
    assert 1 + 1 == 3, "one and one make two"


@pytest.mark.gpu
def test_slow():
    time.sleep(float(__import__("os").environ.get("SLOW_S", "0")))


def test_not_marked():
    raise AssertionError("not selected by -m gpu")
"""


def write_gpu_tests(root):
    (root / "tests" / "gpu").mkdir(parents=True)
    (root / "tests" / "gpu" / "test_cases.py").write_text(GPU_TESTS)
    return root / "tests" / "gpu"


def test_the_gpu_tests_row_counts_each_outcome_and_names_the_failures(tmp_path):
    row = gpu_tests.run_gpu_tests(120, tmp_path / "log.txt", write_gpu_tests(tmp_path))
    assert (row["passed"], row["failed"], row["errors"], row["skipped_tests"]) == (2, 1, 0, 0)  # -m gpu only
    assert row["exit_status"] == 1 and "skipped" not in row
    (failure,) = row["failures"]
    assert failure["test"].endswith("test_cases::test_fails") and "one and one make two" in failure["message"]
    assert "test_fails FAILED" in (tmp_path / "log.txt").read_text()
    assert gpu_tests.summary(row)[1].startswith("  FAILED tests.gpu.test_cases::test_fails: AssertionError")


def test_a_gpu_test_run_over_its_box_is_killed_and_keeps_what_finished(tmp_path, monkeypatch):
    # the box must outlast a pytest start and two trivial tests on a loaded machine (8 s did not, beside a
    # second pytest worker and other processes); the slow test sleeps far past it
    monkeypatch.setenv("SLOW_S", "600")
    row = gpu_tests.run_gpu_tests(15, None, write_gpu_tests(tmp_path))
    assert row["skipped"] == "over 15 s" and (row["passed"], row["failed"]) == (1, 1)
    assert "did not finish: over 15 s (so far: 1 passed, 1 failed" in gpu_tests.summary(row)[0]


def test_without_the_tests_folder_the_row_says_where_to_run_from(tmp_path):
    row = gpu_tests.run_gpu_tests(60, None, tmp_path / "tests" / "gpu")
    assert "beside the package (run from a checkout" in row["skipped"]
