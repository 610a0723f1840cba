"""bench update runs shrunk: both paths on the same rollout compute the same loss, the shared one fewer tokens.

Smoke test by design: the figures live in benchmarks/ (python -m benchmarks update).
"""

import pytest

from benchmarks import update
from benchmarks.update import main


def test_shared_and_unshared_updates_run_side_by_side_on_the_same_rollout(tmp_path, children_here):
    children_here(update, update.run_one)  # its 4 configurations here: fresh processes only cost imports
    result = main(
        ["--model", "tiny", "--prompt-lengths", "24", "--completion-lengths", "6", "--group-sizes", "4",
         "--token-budgets", "0", "64", "--lora-r", "2", "--threads", "1", "--json", str(tmp_path / "u.json")]
    )  # fmt: skip
    rows = result["rows"]
    assert len(rows) == 4 and not any("skipped" in r for r in rows)
    off, on = [r for r in rows if r["token_budget"] == 0]
    assert (off["share_prompt"], on["share_prompt"]) == (False, True)
    assert off["padded_tokens"] == 4 * (24 + 6) and on["padded_tokens"] == 24 + 4 * 6  # the prompt once
    assert on["loss"] == pytest.approx(off["loss"], rel=1e-5)  # the same update
    budgeted = [r for r in rows if r["token_budget"] == 64]
    assert budgeted[0]["micro_batches"] > budgeted[1]["micro_batches"]  # shared packs more completions a batch
    assert (tmp_path / "u.json").exists()
