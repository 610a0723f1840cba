"""bench skip: both updates of each step from the same state, with and without the zero-advantage skip."""

from benchmarks.skip import main


def test_both_updates_run_from_the_same_state_and_agree():
    result = main(["--config", "configs/tiny.yaml", "--steps", "2"])
    rows, summary = result["rows"], result["summary"]
    assert [r["step"] for r in rows] == [0, 1] and all(r["rows"] == 64 for r in rows)  # 8 prompts x G=8
    for r in rows:
        assert 0 <= r["rows_skipped"] <= r["rows"] and r["skip_s"] > 0 and r["full_s"] > 0
        assert r["max_update"] > 0 and r["max_rel_diff"] < 1e-5  # the same update up to float32 rounding
    assert summary["skipped_share"] == sum(r["rows_skipped"] for r in rows) / 128
