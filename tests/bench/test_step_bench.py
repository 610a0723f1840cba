"""The step benchmark measures memory by phase for both log-prob paths (figures are recorded in benchmarks/)."""

import json

import pytest

from benchmarks.step import main, measure_step, recipe_kwargs


@pytest.mark.slow  # over 20 s on a busy 2-core machine
def test_step_benchmark_runs_both_logprob_paths_in_fresh_processes(tmp_path, capsys):
    out = tmp_path / "s.json"
    args = ["--model", "tiny", "--variants", "float-lora", "--logit-chunk-tokens", "16", "0", "--prompts", "2"]
    rows = main([*args, "--group-size", "4", "--max-new-tokens", "16", "--json", str(out)])
    assert [r["logit_chunk_tokens"] for r in rows] == [16, 0] and all("skipped" not in r for r in rows)
    for r in rows:
        assert r["rss_update_rise_bytes"] > 0 and r["rollout_time_s"] > 0 and r["update_time_s"] > 0
    # both start from the same seeded weights and draw the same first rollout: the same gradient
    assert rows[0]["first_grad_norm"] == pytest.approx(rows[1]["first_grad_norm"], rel=1e-5)
    assert rows[0]["first_grad_norm"] > 0
    assert json.loads(out.read_text())["rows"] == rows
    assert "| float-lora | full |" in capsys.readouterr().out


def test_the_qwen3_recipe_runs_offline_as_a_measured_step():
    module_kwargs, data_kwargs = recipe_kwargs(
        "configs/qwen3.yaml",
        model="tiny",
        prompts=1,
        policy={"dtype": "float32"},
        quantization={"bnb_4bit_compute_dtype": "float32"},
        group_size=4,
        sampler={"max_new_tokens": 8},
    )
    assert module_kwargs["update"]["token_budget"] == "auto" and module_kwargs["quantization"]["load_in_4bit"]
    assert module_kwargs["sampler"]["num_slots"] == 16 and module_kwargs["sampler"]["max_new_tokens"] == 8
    result = measure_step(module_kwargs, data_kwargs)
    assert result["device"] == "cpu" and result["token_budget"] > 0 and result["update_time_s"] > 0
    assert "cuda_update_peak_allocated_bytes" not in result  # CUDA figures only on CUDA
    # the rollout's log-probs against the update's (float32 compute here: tiny)
    assert 0 <= result["logprob_mismatch_mean"] <= result["logprob_mismatch_max"] < 0.05
