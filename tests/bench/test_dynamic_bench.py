"""bench dynamic: continuous dynamic sampling against verl's rounds on the same engine (figures: benchmarks/)."""

from benchmarks.dynamic import main


def test_both_schemes_reach_the_target_on_the_same_prompts_and_their_costs_add_up(capsys):
    result = main(["--model", "tiny", "--steps", "2", "--prompts", "2", "--group-size", "4", "--num-slots", "8"])
    rows = result["rows"]
    assert [r["scheme"] for r in rows] == ["rounds", "continuous"] * 2
    for r in rows:
        assert r["groups_trained"] == 2 and r["prompts_drawn"] <= 8
        assert r["generated_tokens"] >= r["dropped_tokens"] + r["wasted_tokens"]
    for rounds in rows[::2]:  # whole rounds of the batch size; the first round is the batch alone
        assert rounds["prompts_drawn"] % 2 == 0 and rounds["plain_informative"] <= 2
    summary = {s["scheme"]: s for s in result["summary"]}
    assert (
        summary["continuous"]["ideal_tokens"]
        == summary["continuous"]["generated_tokens"] - summary["continuous"]["wasted_tokens"]
    )
    assert "continuous / rounds, per informative group" in capsys.readouterr().out
