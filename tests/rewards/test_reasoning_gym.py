import sys

import pytest

from infgrpo.data.reasoning_tasks import task_rows
from infgrpo.rewards import RewardError, compute_rewards
from infgrpo.rewards.reasoning_tasks import extract_answer

rg = pytest.importorskip("reasoning_gym")

CHAIN = {"min_terms": 2, "max_terms": 2, "max_digits": 2}


@pytest.mark.parametrize(
    "completion,answer",
    [
        ("<answer>42</answer>", "42"),
        ("Let me see. <answer> 42 </answer>", "42"),  # padding inside the tags is dropped
        ("<answer>1</answer> no wait <answer>7</answer>", "7"),  # the last pair
        ("<answer>\n  x y \n</answer>", "x y"),
        ("12 + 7 = 19", "12 + 7 = 19"),  # fallback: the last non-empty line
        ("First 12 + 7.\nThe sum is 19.\n\n", "The sum is 19."),
        ("<answer>unclosed", "<answer>unclosed"),
        ("   \n ", None),
    ],
)
def test_the_answer_is_in_the_last_answer_tags_else_the_last_line(completion, answer):
    assert extract_answer(completion) == answer


@pytest.mark.parametrize(
    "completion,answer",
    [
        ("The final answer is 19.", "19"),  # a numeric reference: the last number
        ("12 + 7 = 19\nso 19", "19"),
        ("It is -3.5 or so", "-3.5"),
        ("<answer>twenty</answer> 19", "twenty"),  # tags first
        ("The total is 1,234.", "1234"),  # thousands separators dropped
        ("3, 4 and 5", "5"),  # a list is not one number
        ("no digits here", None),
    ],
)
def test_a_numeric_reference_falls_back_to_the_last_number(completion, answer):
    assert extract_answer(completion, "19") == answer
    assert extract_answer("Sum: 19.", "cat") == "Sum: 19."  # a non-numeric reference keeps the last line


def test_scores_are_the_task_own_score_answer_on_the_extracted_answer():
    _, held_out = task_rows("reasoning_gym:chain_sum", CHAIN, 1, 8, 0, 3)
    reference = rg.create_dataset("chain_sum", size=8, seed=3, **CHAIN)  # the task's own verifier
    completions, metadata, expected = [], [], []
    for row, entry in zip(held_out, reference, strict=True):
        for text, answer in (
            (f"<answer>{entry['answer']}</answer>", entry["answer"]),
            (f"<answer>{int(entry['answer']) + 1}</answer>", str(int(entry["answer"]) + 1)),
            (f"The answer is {entry['answer']}.", entry["answer"]),  # a numeric reference: the last number
            (f"Working... {entry['answer']} or rather {entry['answer']}1", f"{entry['answer']}1"),  # the last one
        ):
            completions.append(text)
            metadata.append(row)
            expected.append(reference.score_answer(answer, entry))
    total, parts = compute_rewards({"reasoning_gym": 1.0}, completions, metadata)
    assert parts["reasoning_gym"].tolist() == pytest.approx(expected)
    assert total.tolist()[::4] == [1.0] * 8 and total.tolist()[1::4] == [0.0] * 8
    assert total.tolist()[2::4] == [1.0] * 8 and all(0 < v < 1 for v in total.tolist()[3::4])  # partial credit


def test_composite_rows_are_scored_by_their_sub_task_as_the_composite_does():
    from reasoning_gym.composite import DatasetSpec

    config = {"datasets": [{"name": "chain_sum", "config": CHAIN}, {"name": "leg_counting", "config": {}}]}
    _, held_out = task_rows("reasoning_gym:composite", config, 1, 12, 0, 4)
    specs = [DatasetSpec("chain_sum", 1, CHAIN), DatasetSpec("leg_counting", 1, {})]
    composite = rg.create_dataset("composite", size=12, seed=4, datasets=specs)
    completions = [
        f"<answer>{row['answer']}</answer>" if i % 2 else "<answer>3</answer>" for i, row in enumerate(held_out)
    ]
    expected = [
        composite.score_answer(extract_answer(c), entry) for c, entry in zip(completions, composite, strict=True)
    ]
    _, parts = compute_rewards({"reasoning_gym": 1.0}, completions, held_out)
    assert parts["reasoning_gym"].tolist() == pytest.approx(expected)
    assert {row["reasoning_gym"]["task"] for row in held_out} == {"chain_sum", "leg_counting"}


def test_entries_from_elsewhere_are_scored_by_the_task_named_in_their_metadata():
    entry = rg.create_dataset("chain_sum", size=1, seed=11, **CHAIN)[0]  # e.g. a row of an exported jsonl
    _, parts = compute_rewards({"reasoning_gym": 1.0}, [f"<answer>{entry['answer']}</answer>", "0"], [entry, entry])
    assert parts["reasoning_gym"].tolist() == [1.0, 0.0 if entry["answer"] != "0" else 1.0]
    with pytest.raises(
        RewardError,
        match=r"scores rows of a data.path: reasoning_gym:<task> source .* \(no reasoning_gym column; metadata None\)",
    ):
        compute_rewards({"reasoning_gym": 1.0}, ["1"], [{"answer": "1"}])


def test_a_missing_reasoning_gym_names_the_pip_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    with pytest.raises(
        RewardError, match=r"the reasoning_gym reward needs reasoning-gym: pip install -e \"\.\[tasks\]\""
    ):
        compute_rewards({"reasoning_gym": 1.0}, ["1"], [{"answer": "1", "reasoning_gym": {"task": "x", "config": {}}}])
