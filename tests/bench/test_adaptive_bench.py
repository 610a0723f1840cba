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


def test_the_memory_bench_grows_groups_to_their_cap_and_tables_the_peak_against_g():
    from benchmarks.adaptive_memory import run_one, tables

    job = dict(model="tiny", prompts=2, group_size=4, num_slots=4, max_new_tokens=8)
    rows = [run_one({**job, "cap": cap}) for cap in (4, 16)]
    fixed, grown = rows
    assert fixed["samples_per_prompt_max"] == 4 and fixed["groups_rescued"] == 0
    assert 4 <= grown["samples_per_prompt_max"] <= 16 and grown["generated_tokens"] >= fixed["generated_tokens"]
    assert all(r["rss_peak_bytes"] >= r["rss_peak_bytes"] - r["rss_rise_bytes"] > 0 for r in rows)
    lines = tables({"job": job, "rows": rows}).splitlines()
    assert lines[0].endswith("| peak RSS vs G |") and lines[2].endswith("| 1.00 |")
