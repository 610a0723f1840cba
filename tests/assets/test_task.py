import random

import pytest

from infgrpo.assets.task import TASKS, flawed, is_eval_prompt, make_split, sample_problem, solve


def test_answers_verify_and_lengths_vary_with_the_prompt():
    rng = random.Random(0)
    lengths = {t: [len(sample_problem(rng, t).answer) for _ in range(300)] for t in TASKS}
    assert min(lengths["rev"]) <= 3 and max(lengths["count"]) >= 64
    assert len({x for v in lengths.values() for x in v}) > 30  # many distinct lengths
    assert solve("count 8 11") == "8 9 10 11" and solve("dup ab") == "aabb" and solve("rev abc") == "cba"


def test_flawed_answers_are_wrong():
    rng = random.Random(1)
    for _ in range(200):
        p = sample_problem(rng)
        assert flawed(p.prompt) != p.answer


def test_splits_are_disjoint_and_reproducible():
    train, held = make_split(500, "train", 0), make_split(100, "eval", 1)
    assert not {p.prompt for p in train} & {p.prompt for p in held}
    assert all(is_eval_prompt(p.prompt) for p in held)
    assert make_split(50, "train", 0) == train[:50]
    assert {p.task for p in held} == set(TASKS)
    with pytest.raises(ValueError, match="split='test'"):
        make_split(1, "test", 0)
