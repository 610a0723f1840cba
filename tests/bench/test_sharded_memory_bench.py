"""``python -m benchmarks sharded-memory``: its recorded run re-renders, each rank holding half (the run itself
starts three processes and loads SmolLM2 in each; tests/test_sharded.py checks the same shards on 2 ranks)."""

import json
from pathlib import Path

from benchmarks.sharded_memory import KINDS, tables

RECORDED = Path(__file__).resolve().parents[2] / "benchmarks" / "sharded_memory_smollm2.json"


def test_the_recorded_run_shows_half_between_steps_and_the_whole_while_decoding():
    result = json.loads(RECORDED.read_text())
    one, ranks = result["one"], result["sharded"]
    assert set(KINDS) <= set(one) and len(ranks) == result["ranks"] == 2
    for name in ("parameters", "gradients", "optimizer"):
        total = sum(rank[name] for rank in ranks)  # the shards add up to the whole (AdamW's step counts: on each)
        assert one[name] <= total <= one[name] * 1.00001
        assert all(abs(rank[name] / one[name] - 0.5) < 0.01 for rank in ranks)
    assert all(rank["rollout_parameters"] == one["parameters"] for rank in ranks)  # gathered in full
    assert "| parameters | 513.1 | 256.6 | 0.50 | 256.6 | 0.50 |" in tables(result)
