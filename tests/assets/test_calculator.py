"""The calculator task of the tool-calling tiny models: its rows, its rewards and its tool's schema."""

import random

import pytest
from transformers.utils import get_json_schema

from infgrpo.assets.calculator import add, called_tool, correct, demonstration, make_split, operands
from infgrpo.builds.exchanges import plausible_guess

PROMPT = [{"role": "user", "content": "12345+67890?"}]


def test_rows_hold_large_sums_and_the_splits_never_share_a_prompt():
    train, held = make_split(300, seed=0), make_split(50, seed=1, split="eval")
    assert train == make_split(300, seed=0)
    for row in train + held:
        a, b = operands(row["prompt"])
        assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"] == f"{a}+{b}?"
        assert row["answer"] == str(a + b) and 4 <= len(str(a)) <= 6 and 4 <= len(str(b)) <= 6
    texts = [r["prompt"][0]["content"] for r in train]
    assert len(set(texts)) == len(texts)
    assert not set(texts) & {r["prompt"][0]["content"] for r in held}
    with pytest.raises(ValueError, match="split='test'"):
        make_split(1, seed=0, split="test")


def test_reward_scores_the_last_assistant_message():
    exchange = demonstration(PROMPT)
    wrong = demonstration(PROMPT, guess="80234")
    assert exchange[-1]["content"] == "80235"
    assert correct([exchange, wrong, [], " 80235\n"], ["80235"] * 4) == [1.0, 0.0, 0.0, 1.0]
    assert called_tool([exchange, wrong, "80235"]) == [1.0, 0.0, 0.0]
    guess = plausible_guess("80235", random.Random(0))
    assert guess != "80235" and len(guess) == 5 and guess[:2] == "80"


def test_add_has_a_json_schema_for_the_chat_template():
    schema = get_json_schema(add)
    assert schema["function"]["name"] == "add"
    params = schema["function"]["parameters"]
    assert params["properties"] == {
        "a": {"type": "integer", "description": "The first number."},
        "b": {"type": "integer", "description": "The second number."},
    }
    assert params["required"] == ["a", "b"]
