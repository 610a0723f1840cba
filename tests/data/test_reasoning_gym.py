import sys

import pytest

from infgrpo.data import PromptDataModule
from infgrpo.data.reasoning_tasks import task_rows
from infgrpo.policy.load import load_tokenizer

rg = pytest.importorskip("reasoning_gym")

CHAIN = {"min_terms": 2, "max_terms": 2, "max_digits": 2}
SMALL = {"min_terms": 2, "max_terms": 2, "max_digits": 1}  # 200 distinct questions: overlaps are certain


def chain_sum(**kw):
    kw = {"task_config": CHAIN, "train_size": 40, "eval_size": 10, "max_prompt_length": 256, **kw}
    return PromptDataModule(path="reasoning_gym:chain_sum", batch_size=4, **kw)


def test_rows_are_the_task_entries_with_the_template_and_chat_template():
    dm = chain_sum(prompt_template="{question} Give only the final answer.", eval_task_seed=7)
    dm.setup("fit")
    assert len(dm.train_items) == 40 and len(dm.eval_items) == 10
    reference = rg.create_dataset("chain_sum", size=10, seed=7, **CHAIN)  # the held-out rows, from reasoning-gym
    for item, entry in zip(dm.eval_items, reference, strict=True):
        assert item["meta"]["question"] == entry["question"] and item["meta"]["answer"] == entry["answer"]
        assert item["meta"]["metadata"] == entry["metadata"]
        assert item["prompt_text"] == entry["question"] + " Give only the final answer."
    text = load_tokenizer("tiny").decode(dm.eval_items[0]["prompt_ids"])
    assert text.startswith("<|im_start|>user\nState the final answer") and "Give only the final answer." in text
    meta = dm.train_items[0]["meta"]
    assert meta["reasoning_gym"]["task"] == "chain_sum" and meta["reasoning_gym"]["config"]["seed"] == 0


def test_held_out_questions_are_never_training_questions():
    held_out_seed = 1  # neighbouring seeds: most tasks seed item i with seed + i, so they share items
    naive_train = [e["question"] for e in rg.create_dataset("chain_sum", size=300, seed=0, **SMALL)]
    naive_eval = {e["question"] for e in rg.create_dataset("chain_sum", size=50, seed=held_out_seed, **SMALL)}
    assert len(set(naive_train) & naive_eval) > 20  # a different seed alone would leak held-out prompts
    train, held_out = task_rows("reasoning_gym:chain_sum", SMALL, 300, 50, 0, held_out_seed)
    assert len(train) == 300 and len(held_out) == 50
    assert not {r["question"] for r in train} & {r["question"] for r in held_out}
    kept = [q for q in naive_train if q not in naive_eval]
    assert [r["question"] for r in train[: len(kept)]] == kept  # the same draws, minus the held-out questions


def test_same_settings_give_the_same_prompts_and_the_order_resumes():
    a, b, other = chain_sum(), chain_sum(), chain_sum(task_seed=5)
    for dm in (a, b, other):
        dm.setup("fit")
    assert [it["prompt_ids"] for it in a.train_items] == [it["prompt_ids"] for it in b.train_items]
    assert [it["prompt_text"] for it in a.train_items] != [it["prompt_text"] for it in other.train_items]
    straight = [[it["prompt_text"] for it in batch] for batch in a.train_dataloader()]
    first = b.train_dataloader()
    seen = []
    for batch in first:
        seen.append([it["prompt_text"] for it in batch])
        b.batch_sampler.mark_consumed()
        if len(seen) == 3:
            break
    resumed = chain_sum()
    resumed.setup("fit")
    resumed.load_state_dict(b.state_dict())
    rest = [[it["prompt_text"] for it in batch] for batch in resumed.train_dataloader()]
    assert seen + rest == straight


def test_composite_mixes_tasks_and_each_row_names_the_task_that_verifies_it():
    config = {
        "datasets": [
            {"name": "chain_sum", "weight": 1, "config": CHAIN},
            {"name": "leg_counting", "config": {}},  # weight 1 when left out
        ]
    }
    train, held_out = task_rows("reasoning_gym:composite", config, 60, 20, 0, 9)
    from reasoning_gym.composite import DatasetSpec

    specs = [DatasetSpec("chain_sum", 1, CHAIN), DatasetSpec("leg_counting", 1, {})]
    reference = list(rg.create_dataset("composite", size=20, seed=9, datasets=specs))
    assert [r["question"] for r in held_out] == [e["question"] for e in reference]
    tasks = {r["reasoning_gym"]["task"] for r in train}
    assert tasks == {"chain_sum", "leg_counting"}
    for row in train:
        assert row["reasoning_gym"]["task"] == row["metadata"]["source_dataset"]
    chain = next(r for r in train if r["reasoning_gym"]["task"] == "chain_sum")
    assert chain["reasoning_gym"]["config"]["max_digits"] == 2  # the sub-task's own settings


@pytest.mark.parametrize(
    "path,task_config,match",
    [
        (
            "reasoning_gym:chain_sun",
            None,
            r"'chain_sun' is not a reasoning-gym task \(did you mean 'chain_sum'\?\); known: ab, ",
        ),
        (
            "reasoning_gym:chain_sum",
            {"terms": 2},
            r"chain_sum has no setting 'terms'; its settings: min_terms, max_terms",
        ),
        (
            "reasoning_gym:chain_sum",
            {"min_terms": 3, "max_terms": 2},
            "not valid for chain_sum: max_terms must be >= min_terms",
        ),
        (
            "reasoning_gym:chain_sum",
            {"seed": 3},
            r"data.task_config sets 'seed'; set data.task_seed / data.eval_task_seed",
        ),
        ("reasoning_gym:composite", {}, "reasoning_gym:composite needs datasets"),
        (
            "reasoning_gym:composite",
            {"datasets": [{"name": "sumz"}]},
            r"datasets\[0\]: 'sumz' is not a reasoning-gym task",
        ),
        (
            "reasoning_gym:composite",
            {"datasets": [{"name": "chain_sum", "weight": 0}]},
            r"datasets\[0\].weight=0 must be",
        ),
        ("tiny", {"max_terms": 2}, "data.task_config is set, but data.path='tiny' is no reasoning_gym:<task> source"),
    ],
)
def test_bad_task_settings_are_clear_errors_before_anything_is_generated(path, task_config, match):
    with pytest.raises(ValueError, match=match):
        PromptDataModule(path=path, task_config=task_config)


def test_seeds_sizes_and_a_task_too_small_for_them_are_clear_errors():
    with pytest.raises(ValueError, match="data.eval_task_seed=0 must differ from data.task_seed"):
        chain_sum(eval_task_seed=0)
    with pytest.raises(ValueError, match="data.train_size=0 must be >= 1"):
        chain_sum(train_size=0)
    tiny_task = {"min_terms": 1, "max_terms": 1, "max_digits": 1}  # 10 distinct questions
    with pytest.raises(ValueError, match=r"only 0 of 1600 generated training prompts are not among the 50 held-out"):
        task_rows("reasoning_gym:chain_sum", tiny_task, 100, 50, 0, 1)


def test_a_missing_reasoning_gym_names_the_pip_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import reasoning_gym now raises ImportError
    with pytest.raises(
        ImportError, match=r"data.path='reasoning_gym:chain_sum' needs reasoning-gym: pip install -e \"\.\[tasks\]\""
    ):
        PromptDataModule(path="reasoning_gym:chain_sum")
