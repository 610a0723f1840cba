"""The twins of the reasoning recipe's rewards give the recipe's values: each against a reference written here from
the recipe's definition (open-r1's ``rewards.py``; its package is not on PyPI), on 64 conversational completions."""

import math
import random
import re
from fractions import Fraction

import pytest
import torch
from latex2sympy2_extended import NormalizationConfig
from math_verify import LatexExtractionConfig, parse, verify
from trl.rewards import get_soft_overlong_punishment

from infgrpo.rewards import score_rewards
from infgrpo.rewards.core import resolve_reward
from infgrpo.rewards.open_r1 import CodeFormat, CosineScaled, RepetitionPenalty

PIECES = ["<think>", "\n", "</think>", "<answer>", "</answer>", "Step 1: add", "Step 2:", "1. first", "\n- item",
          "\n* star", "First, ", "Next, ", "Finally, ", "the the the cat", r"\boxed{7}", r"$\frac{1}{2}$", "$7$",
          "```python\nprint(1)\n```", "```cpp\nint x;\n```", "so", "x y z x y z", r"\boxed{0.5}"]  # fmt: skip
SOLUTIONS = ["$7$", r"$\frac{1}{2}$", "7", "no math here", r"$\boxed{3}$"]


def completions(n: int = 64, seed: int = 0) -> list[str]:
    """``n`` texts: the format's exact shapes, near misses (one newline off, tags twice) and random concatenations."""
    rng = random.Random(seed)
    exact = [
        "<think>\nStep 1: add\n</think>\n<answer>\n$7$\n</answer>",
        "<think>\nfirst\n</think>\n<answer>\n```python\nprint(1)\n```\n</answer>",
        "<think>\nx\n</think>\n<answer>\n```cpp\nint x;\n```\n</answer>\ntrailing line",
        "<think>\nx\n</think><answer>\n7\n</answer>",
        "<think>\n<think>\nx\n</think>\n<answer>\n7\n</answer>",
        "1. first\n2. second\n- third",
        "",
    ]
    out = list(exact)
    while len(out) < n:
        out.append("".join(rng.choice(PIECES) for _ in range(rng.randint(1, 9))))
    return out


TEXTS = completions()
MESSAGES = [[{"role": "assistant", "content": t}] for t in TEXTS]
SOLS = [SOLUTIONS[i % len(SOLUTIONS)] for i in range(len(TEXTS))]


def recipe_latex(boxed):
    """The recipe's LaTeX extraction of an answer (its NormalizationConfig, equations=True included)."""
    options = NormalizationConfig(
        nits=False, malformed_operators=False, basic_latex=True, equations=True, boxed=boxed, units=True
    )
    return [
        LatexExtractionConfig(normalization_config=options, boxed_match_priority=0, try_extract_without_anchor=False)
    ]


def ref_accuracy(text, sol):
    gold = parse(sol, extraction_mode="first_match")
    if not gold:
        return None
    answer = parse(text, extraction_config=recipe_latex("all"), extraction_mode="first_match")
    try:
        return float(verify(gold, answer))
    except Exception:  # noqa: BLE001
        return None


def ref_correct_latex(text, sol):
    """(gold parses, correct) as the recipe's cosine and length read them."""
    gold = parse(sol, extraction_mode="first_match", extraction_config=[LatexExtractionConfig()])
    if not gold:
        return False, True
    answer = parse(text, extraction_config=recipe_latex(True), extraction_mode="first_match")
    return True, verify(answer, gold)


def ref_format(text):  # the recipe's pattern, spelled out: start tags, then any line end after </answer>
    m = re.match(r"<think>\n(.*?)\n</think>\n<answer>\n(.*?)\n</answer>(\n|$)", text, re.DOTALL)
    return 1.0 if m else 0.0


def ref_tag_count(text):
    return float(sum(Fraction(1, 4) for tag in ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")
                     if text.count(tag) == 1))  # fmt: skip


def ref_steps(text):
    markers = len(re.findall(r"Step \d+:", text)) + (1 if re.match(r"\d+\.", text) else 0)
    markers += text.count("\n-") + text.count("\n*")
    markers += sum(text.count(w) for w in ("First,", "Second,", "Next,", "Finally,"))
    return min(1.0, markers / 3)


def ref_length(texts, sols):
    lengths = [len(t) for t in texts]
    lo, hi = min(lengths), max(lengths)
    if lo == hi:
        return [0.0] * len(texts)
    out = []
    for t, s, n in zip(texts, sols, lengths, strict=True):
        lam = Fraction(1, 2) - Fraction(n - lo, hi - lo)
        out.append(float(lam if ref_correct_latex(t, s)[1] else min(0, lam)))
    return out


def ref_cosine(text, sol, lo_wrong, hi_wrong, lo_right, hi_right, max_len):
    parsed, correct = ref_correct_latex(text, sol)
    if not parsed:
        return 1.0
    low, high = (lo_right, hi_right) if correct else (hi_wrong, lo_wrong)
    return low + (high - low) * (1 + math.cos(math.pi * len(text) / max_len)) / 2


def ref_repetition(text, n, penalty):
    words = text.lower().split()
    if not text or len(words) < n:
        return 0.0
    grams = list(zip(*[words[i:] for i in range(n)], strict=False))
    return (1 - len(set(grams)) / len(grams)) * penalty


def ref_code_format(text, lang):
    body = re.match(r"<think>\n.*?\n</think>\n<answer>\n(.*?)\n</answer>(\n|$)", text, re.DOTALL)
    return 1.0 if body and re.search(rf"```{lang}.*?```", body.group(1), re.DOTALL) else 0.0


def close(got, want):
    assert len(got) == len(want) == len(TEXTS) >= 50
    for g, w in zip(got, want, strict=True):
        assert (g is None and w is None) or abs(g - w) <= 1e-12, (g, w)


def test_the_completions_exercise_each_reward_both_ways():
    tags = [ref_tag_count(t) for t in TEXTS]
    assert {ref_format(t) for t in TEXTS} == {0.0, 1.0} and len(set(tags)) >= 4
    assert len({ref_steps(t) for t in TEXTS}) >= 3 and {ref_code_format(t, "cpp") for t in TEXTS} == {0.0, 1.0}


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("open_r1_format", ref_format),
        ("open_r1_tag_count", ref_tag_count),
        ("open_r1_reasoning_steps", ref_steps),
        ("open_r1_code_format", lambda t: ref_code_format(t, "python")),
        ("open_r1_repetition_penalty", lambda t: ref_repetition(t, 3, -1.0)),
    ],
)
def test_text_twins_equal_the_recipe_s_definitions(name, reference):
    close(resolve_reward(name)(MESSAGES), [reference(t) for t in TEXTS])


def test_math_twins_equal_the_recipe_s_definitions():
    accuracy = resolve_reward("open_r1_accuracy")(MESSAGES, solution=SOLS)
    close(accuracy, [ref_accuracy(t, s) for t, s in zip(TEXTS, SOLS, strict=True)])
    assert {None, 0.0, 1.0} <= set(accuracy)
    close(resolve_reward("open_r1_length")(MESSAGES, solution=SOLS), ref_length(TEXTS, SOLS))
    args = (-1.0, -0.25, 0.25, 2.0, 120)
    close(
        CosineScaled(*args)(MESSAGES, solution=SOLS),
        [ref_cosine(t, s, *args) for t, s in zip(TEXTS, SOLS, strict=True)],
    )


def test_parameters_and_the_language_column():
    close(RepetitionPenalty(2, -0.5)(MESSAGES), [ref_repetition(t, 2, -0.5) for t in TEXTS])
    languages = ["cpp" if i % 2 else "python" for i in range(len(TEXTS))]
    close(
        CodeFormat("java")(MESSAGES, language=languages),
        [ref_code_format(t, lang) for t, lang in zip(TEXTS, languages, strict=True)],
    )
    with pytest.raises(ValueError, match="max_penalty=0.5 must be <= 0"):
        RepetitionPenalty(3, 0.5)


def test_length_is_normalized_over_the_completions_of_one_call():
    """TRL hands a reward the whole batch at once: min and max lengths are the call's, so the same completion scores
    differently beside others; through infgrpo's scoring, one call holds every completion."""
    rows = [{"prompt": [{"role": "user", "content": "q"}], "solution": s} for s in SOLS]
    scores = score_rewards({"open_r1_length": 1.0}, TEXTS, rows)  # conversational rows: message completions
    assert scores.parts["open_r1_length"].tolist() == torch.tensor(ref_length(TEXTS, SOLS)).tolist()  # float32
    assert resolve_reward("open_r1_length")(MESSAGES[:2], solution=SOLS[:2]) != ref_length(TEXTS, SOLS)[:2]


def test_soft_overlong_is_trl_s_factory_with_the_recipe_s_formula():
    ids = [[0] * n for n in range(0, 40, 3)]
    want = [0.0 if n <= 20 else (20 - n) / 10 if n <= 30 else -1.0 for n in range(0, 40, 3)]
    assert get_soft_overlong_punishment(30, 10)(ids) == pytest.approx(want, abs=1e-12)


def test_string_completions_are_read_as_their_text():
    assert resolve_reward("open_r1_tag_count")(TEXTS[:3]) == [ref_tag_count(t) for t in TEXTS[:3]]
