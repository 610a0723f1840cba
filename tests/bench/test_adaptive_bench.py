from benchmarks.adaptive import main


def test_the_adaptive_bench_runs_shrunk_and_its_counts_add_up():
    result = main(["--model", "tiny", "--steps", "1", "--prompts", "2", "--group-size", "4", "--num-slots", "8",
                   "--max-new-tokens", "24", "--cap", "16", "--variants", "plain", "uniform", "value"])  # fmt: skip
    s = {r["variant"]: r for r in result["summary"]}
    assert set(s) == {"plain", "uniform", "value"}
    for r in s.values():
        assert 0 <= r["rescued"] <= r["informative"] <= 2 and r["generated_tokens"] > 0
    assert s["plain"]["rescued"] == 0 and s["plain"]["samples_per_prompt_max"] == 4
    assert s["value"]["samples_per_prompt_max"] <= 16
    # the same prompts and streams: adaptive groups hold every informative group plain has
    assert s["uniform"]["informative"] >= s["plain"]["informative"] <= s["value"]["informative"]
