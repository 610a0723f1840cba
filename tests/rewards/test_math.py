import threading

import pytest

from infgrpo.rewards import compute_rewards
from infgrpo.rewards.math import extract_number, math_reward, numeric_reward

MATH_CASES = [  # (reference, completion, hand-checked reward)
    (r"\frac{1}{3}", r"My answer is \boxed{\frac{1}{3}}", 1.0),
    (r"\frac{1}{3}", r"My answer is \boxed{\frac{1}{2}}", 0.0),
    ("0.5", r"so the answer is $\frac{1}{2}$.", 1.0),
    ("0.5", r"so $\frac{1}{2}$", 0.0),  # math-verify finds no final answer in it (TRL's reward neither)
    ("1024", r"\boxed{2^{10}}", 1.0),
    ("19", "12 + 7 = 19", 0.0),  # bare text numbers do not count: LaTeX only
    (r"$\{1, 2\}$", r"\boxed{\{2, 1\}}", 1.0),  # sets
    ("$(1, 3)$", r"the answer is $(1, 3)$.", 1.0),  # intervals
    ("12", r"\boxed{12\%}", 1.0),
    ("72", "Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72", 0.0),
    ("no answer here", r"\boxed{3}", None),  # an unreadable reference
]


def test_math_reward_computes_what_trl_accuracy_reward_computes():
    trl = pytest.importorskip("trl.rewards")
    refs, texts, hand = zip(*MATH_CASES, strict=True)
    want = trl.accuracy_reward([[{"role": "assistant", "content": t}] for t in texts], list(refs))
    got = math_reward(list(texts), list(refs))
    assert got == want
    assert got == list(hand)


def test_math_reward_without_a_readable_reference_does_not_apply_as_in_trl():
    meta = [{"answer": "no answer here"}, {"answer": "3"}]
    total, parts = compute_rewards({"math": 1.0, "format": 1.0}, [r"\boxed{3}", r"\boxed{3}"], meta)
    assert parts["math"][0].isnan() and parts["math"][1] == 1.0  # None: left out of the row's sum, as TRL does
    assert total.tolist() == [0.0, 1.0]  # the format reward alone scores row 0


@pytest.mark.parametrize(
    "text,value",
    [  # read by math-verify inside the box; the hand-written reading of the same text is wrong
        (r"\boxed{2^{10}}", 1024.0),
        (r"\boxed{\sqrt{16}}", 4.0),
        (r"\boxed{3 \times 4}", 12.0),
        (r"\boxed{\frac{3}{4} + \frac{1}{4}}", 1.0),
        (r"so \boxed{-\dfrac{1}{8}}", -0.125),
        (r"\boxed{x = 3}", 3.0),  # no number for math-verify: the hand-written fallback
        ("#### 72 and then 5 more", 72.0),  # GSM8K's anchor, which math-verify lacks (it reads 5)
    ],
)
def test_numeric_reads_boxed_latex_with_math_verify(text, value):
    assert extract_number(text) == pytest.approx(value)


REGRESSION = [  # the hand-written cases of test_rewards.py, now through the reward against a reference
    ("so 3 + 4 = 7.\n#### 1,234", "1234"),
    (r"The answer is \boxed{$42.50}", "42.5"),
    ("about 12 apples and 15 pears", "15"),
    ("#### -3 dollars", "-3"),
    (r"so \boxed{1{,}000}", "1000"),
    (r"\boxed{1\,000}", "1000"),
    (r"\boxed{\frac{1}{2}}", "0.5"),
    (r"\boxed{-\dfrac{3}{4}} at last", "-0.75"),
    (r"\boxed{12\%}", "12"),
    ("pages 10-20", "20"),
    ("in 2023-2024", "2024"),
    ("items 1,2,3", "3"),
    ("\u22125 degrees", "-5"),
    ("x = -7.", "-7"),
]


def test_numeric_reward_keeps_the_hand_written_cases():
    texts, refs = zip(*REGRESSION, strict=True)
    right = numeric_reward(list(texts), [f"#### {r}" for r in refs])
    wrong = numeric_reward(list(texts), [f"#### {float(r) + 1}" for r in refs])
    assert right == [1.0] * len(REGRESSION) and wrong == [0.0] * len(REGRESSION)


def test_rewards_on_math_verify_run_outside_the_main_thread():
    # math-verify's timeouts use signal.alarm, which raises outside the main thread unless turned off
    texts = [r"\boxed{\frac{1}{2}}", r"\boxed{2^{10}}", "#### 7"]
    meta = ["0.5", "1024", "8"]
    results = {}

    def score():
        results["math"] = math_reward(texts, meta)
        results["numeric"] = numeric_reward(texts, meta)

    worker = threading.Thread(target=score)
    worker.start()
    worker.join()
    assert results == {"math": [1.0, 1.0, 0.0], "numeric": [1.0, 1.0, 0.0]}
