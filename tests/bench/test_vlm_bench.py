"""bench vlm: TRL 1.16's GRPOTrainer and infgrpo on the tiny VLM, the vision tower's images counted (shrunk: a step of
2 prompts x G=2 on a parquet of 2 shapes rows), and a rollout's memory at two group sizes."""

import pytest

from benchmarks import vlm
from infgrpo.assets.shapes import make_split

pytest.importorskip("trl")


@pytest.mark.slow  # two whole trainings (TRL's and a Lightning fit), in this process
def test_both_trainers_train_the_same_rows_and_trl_encodes_each_image_g_times(children_here, tmp_path):
    from datasets import Dataset

    Dataset.from_list(make_split(2, "train", 0)).to_parquet(str(tmp_path / "train.parquet"))  # TRL's format
    children_here(vlm, vlm.run_one)
    p, g = 2, 2
    result = vlm.main(["--steps", "1", "--repeats", "1", "--prompts", str(p), "--group-size", str(g),
                       "--max-new-tokens", "4", "--lora-r", "4", "--data", str(tmp_path), "--memory-groups", "2", "4",
                       "--memory-prompts", "2"])  # fmt: skip
    runs = {r["trainer"]: r for r in result["trl"]}
    ours, trl = runs["infgrpo"], runs["trl"]
    assert [r["trainer"] for r in result["trl"]] == ["infgrpo", "trl"]  # run 0: infgrpo first, then alternating
    assert trl["same_prompt_ids"] is True  # TRL renders the prompt ids infgrpo decodes from, in the same order
    assert ours["prompt_tokens"] == trl["prompt_tokens"] > 0
    assert ours["trainable_parameters"] == trl["trainable_parameters"] > 0  # the same adapters on both sides
    assert len(ours["seconds"]) == len(trl["seconds"]) == 1
    # TRL: every forward pass encodes prompts x G images (its rows are repeated G times): the generation's prefill
    # and the loss's forward (one micro-batch of p x g <= 8 rows, beta 0, one iteration: no other pass)
    assert vlm.per_step(trl, "rollout", "images") == vlm.per_step(trl, "update", "images") == p * g
    # infgrpo: each prompt's image once a step, in the rollout; the update reuses its features (the tower is frozen)
    assert vlm.per_step(ours, "rollout", "images") == p and vlm.per_step(ours, "update", "images") == 0
    assert sum(ours["engine_prefill_tokens"]) == ours["prompt_tokens"]  # each prompt prefilled once, not G times
    assert vlm.per_group(trl, trl["counts"]["rollout"]["wide_positions"]) >= g * trl["prompt_tokens"] / p
    assert all(r["rss_peak_bytes"] > 0 and r["gc_full_collections"] >= 0 for r in (ours, trl))
    memory = result["memory"]
    assert [r["group_size"] for r in memory] == [2, 4] and [r["completions"] for r in memory] == [4, 8]
    assert all(r["images"] == 2 and r["prefill_tokens"] == r["prompt_tokens"] for r in memory)  # once, whatever G
    text = vlm.tables(result)
    assert "| images through the tower / step, rollout | 2 | 4 | 0.50 |" in text
    assert "peak RSS at G=4 / at G=2" in text
