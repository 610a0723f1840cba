"""bench agent: a tool-using rollout's memory against G, and its wall time beside TRL 1.16's tool loop (shrunk)."""

import pytest

from benchmarks import agent
from benchmarks.agent import main

pytest.importorskip("trl")


def test_memory_rows_and_both_trainers_on_the_same_prompts(children_here):
    children_here(agent, agent.run_one)
    result = main(["--groups", "2", "4", "--prompts", "1", "--latency-prompts", "2", "--latency-group", "2",
                   "--repeats", "1", "--slow", "0.05", "--sleep", "0.0"])  # fmt: skip
    memory, latency = result["memory"], result["latency"]
    assert [r["group_size"] for r in memory] == [2, 4] and [r["completions"] for r in memory] == [2, 4]
    assert all(r["rss_peak"] > 0 and r["kv_bytes_peak"] > 0 for r in memory)
    assert latency["same_prompt_ids"] is True  # TRL renders the prompts infgrpo decodes from
    assert len(latency["runs"]["infgrpo"]) == len(latency["runs"]["trl"]) == 1
    assert latency["infgrpo_s"] > 0 and latency["trl_s"] > 0
    assert "median wall s: infgrpo" in agent.tables(result)
