"""Twins of the reasoning recipes' rewards (open-r1's ``rewards.py`` registry), giving the recipe's values.

    from infgrpo.rewards import score_rewards
    completions = ["<think>\\n2+2\\n</think>\\n<answer>\\n4\\n</answer>"]
    rows = [{"prompt": [{"role": "user", "content": "2+2?"}], "solution": "$4$"}]
    score_rewards({"open_r1_tag_count": 1.0, "open_r1_format": 1.0}, completions, rows).total   # tensor([2.])

The recipe's ``grpo.py`` names its rewards in ``get_reward_funcs``; ``python -m infgrpo.from_trl`` writes these names
for them. Each twin computes what the recipe's function computes, on the same completions (``tests/rewards`` checks
them to 1e-12 against the recipe's definitions on conversational completions); a plain string completion (a string
prompt) is read as its text, where the recipe's would stop:

=======================  ======================================================================================
recipe name              twin
=======================  ======================================================================================
``accuracy``             ``open_r1_accuracy``: math-verify of ``solution`` against the completion's LaTeX answer
                         (the recipe's normalization: no ``nits``, no malformed operators); None where
                         ``solution`` does not parse or ``verify`` raises
``format``               ``open_r1_format``: ``^<think>\\n.*?\\n</think>\\n<answer>\\n.*?\\n</answer>$`` (``re.match``,
                         DOTALL and MULTILINE: ``$`` may stop at any line's end)
``tag_count``            ``open_r1_tag_count``: 0.25 for each of ``<think>\\n``, ``\\n</think>\\n``, ``\\n<answer>\\n``,
                         ``\\n</answer>`` found exactly once
``reasoning_steps``      ``open_r1_reasoning_steps``: min(1, steps / 3), steps = matches of ``Step N:``, a line
                         opening ``N.``, ``\\n-``, ``\\n*``, ``First,`` ``Second,`` ``Next,`` ``Finally,``
``cosine``               :class:`CosineScaled` (``open_r1_cosine``: the script's defaults): a cosine of the
                         completion's *characters* over ``max_len``; an unparseable ``solution`` scores 1.0
``repetition_penalty``   :class:`RepetitionPenalty` (``open_r1_repetition_penalty``): the share of repeated
                         lower-cased *word* n-grams x ``max_penalty``
``length``               ``open_r1_length``: Kimi 1.5's length reward over the completions of one call
                         (see :func:`length_reward`)
``code_format``          :class:`CodeFormat` (``open_r1_code_format``: Python): ``format`` with a
                         fenced code block of the row's ``language`` column (else ``language``) in the answer
=======================  ======================================================================================

TRL's own ports differ: its ``accuracy_reward`` parses with other options, its cosine counts tokens and clamps, its
repetition penalty counts token n-grams. The recipe's ``soft_overlong_punishment`` is TRL's
``get_soft_overlong_punishment`` (same formula, on ``completion_ids``). The recipe's ``code``, ``binary_code``,
``ioi_code`` and ``cf_code`` run code in a sandbox service: they are named as the recipe's functions with their
arguments bound (``partial(open_r1.rewards:code_reward, ...)``, :mod:`infgrpo.rewards.sources`).
"""

from __future__ import annotations

import math
import re
from typing import Any

from infgrpo.rewards.core import REWARDS
from infgrpo.rewards.math import _timeout


def first_content(completions: list[Any]) -> list[str]:
    """Each completion's text as the recipe reads it: its first message's ``content`` (a string as it is)."""
    return [c if isinstance(c, str) else c[0]["content"] for c in completions]


def _latex_answer(boxed: Any) -> list[Any]:
    """The recipe's extraction of a completion's answer: LaTeX only, ``\\boxed{}`` first, no bare text; its
    normalization without ``nits`` and malformed operators (``boxed`` as the recipe passes it: ``"all"`` for
    ``accuracy``, ``True`` for ``cosine`` and ``length``)."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig

    # the recipe also sets equations=True, which latex2sympy only logs as deprecated (no effect): left out
    options = NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True, boxed=boxed, units=True)
    return [
        LatexExtractionConfig(normalization_config=options, boxed_match_priority=0, try_extract_without_anchor=False)
    ]


def _parse_answer(text: str, boxed: Any) -> list[Any]:
    """The completion's answer parsed as the recipe parses it (first match of :func:`_latex_answer`)."""
    from math_verify import parse

    return parse(
        text, extraction_config=_latex_answer(boxed), extraction_mode="first_match", parsing_timeout=_timeout(5)
    )


def _parse_gold_latex(solution: str) -> list[Any]:
    """``solution`` as ``cosine`` and ``length`` read it: LaTeX extraction with math-verify's defaults, first match."""
    from math_verify import LatexExtractionConfig, parse

    return parse(solution, extraction_mode="first_match", extraction_config=[LatexExtractionConfig()],
                 parsing_timeout=_timeout(5))  # fmt: skip


def _verified(gold: list[Any], answer: list[Any]) -> bool:
    """``verify(gold, answer)`` with the recipe's defaults (timeouts off outside the main thread)."""
    from math_verify import verify

    return verify(gold, answer, timeout_seconds=_timeout(5))


@REWARDS.register("open_r1_accuracy")
def accuracy_reward(completions: list[Any], solution: list[str], **kwargs: Any) -> list[float | None]:
    """1.0 or 0.0: ``solution`` (math-verify's default extraction, first match) against the completion's LaTeX
    answer; None where ``solution`` does not parse or ``verify`` raises (the row is left out, as the recipe does)."""
    from math_verify import parse

    out: list[float | None] = []
    for text, sol in zip(first_content(completions), solution, strict=True):
        gold = parse(sol, extraction_mode="first_match", parsing_timeout=_timeout(5))
        if not gold:
            out.append(None)
            continue
        try:
            out.append(float(_verified(gold, _parse_answer(text, "all"))))
        except Exception:  # noqa: BLE001 - the recipe scores a verify failure as None
            out.append(None)
    return out


_FORMAT = re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$", re.DOTALL | re.MULTILINE)


@REWARDS.register("open_r1_format")
def format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """1.0 when the completion matches ``<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>`` from its start
    (``$`` in MULTILINE mode: a line may follow the closing tag)."""
    return [1.0 if _FORMAT.match(text) else 0.0 for text in first_content(completions)]


TAGS = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")
"""The pieces ``tag_count`` counts, 0.25 each when present exactly once."""


@REWARDS.register("open_r1_tag_count")
def tag_count_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """0.25 for each of :data:`TAGS` that occurs exactly once in the completion (0.0 to 1.0)."""
    return [sum(0.25 for tag in TAGS if text.count(tag) == 1) for text in first_content(completions)]


_STEPS = re.compile(r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)")


@REWARDS.register("open_r1_reasoning_steps")
def reasoning_steps_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """``min(1, n / 3)``, n the step markers of the completion (``^`` without MULTILINE: a numbered item counts
    only at the very start)."""
    return [min(1.0, len(_STEPS.findall(text)) / 3) for text in first_content(completions)]


@REWARDS.register("open_r1_length")
def length_reward(completions: list[Any], solution: list[str], **kwargs: Any) -> list[float]:
    """Kimi 1.5's length reward: ``lam = 0.5 - (len - min_len) / (max_len - min_len)`` over the completions'
    characters, ``lam`` for a correct answer, ``min(0, lam)`` for a wrong one; all 0.0 when every length is equal. A
    ``solution`` math-verify cannot parse counts as correct.

    ``min_len`` and ``max_len`` are those of the completions of this call: TRL calls a reward once with the whole
    generation batch of a process, infgrpo once a step with a rank's ``data.batch_size x group_size`` completions
    (the same set when ``data.batch_size`` is TRL's prompts per process, as the converter writes it). Under dynamic
    sampling or adaptive groups the judge scores each group as it ends: ``min_len`` and ``max_len`` are then those
    of the group's ``group_size`` completions (advantages compare within a group only, but a group's values then
    differ from TRL's)."""
    texts = first_content(completions)
    correct = []
    for text, sol in zip(texts, solution, strict=True):
        gold = _parse_gold_latex(sol)
        correct.append(True if not gold else bool(_verified(_parse_answer(text, True), gold)))  # the recipe's order
    lengths = [len(text) for text in texts]
    shortest, longest = min(lengths), max(lengths)
    if shortest == longest:
        return [0.0] * len(texts)
    out = []
    for length, right in zip(lengths, correct, strict=True):
        lam = 0.5 - (length - shortest) / (longest - shortest)
        out.append(float(lam if right else min(0, lam)))
    return out


class CosineScaled:
    """The recipe's ``cosine`` reward: ``lo + (hi - lo) (1 + cos(pi * chars / max_len)) / 2``, with (lo, hi) =
    (``min_value_correct``, ``max_value_correct``) for a correct answer and (``max_value_wrong``,
    ``min_value_wrong``) for a wrong one; 1.0 where ``solution`` does not parse. Defaults: the recipe script's."""

    __name__ = "cosine_scaled_reward"

    def __init__(
        self,
        min_value_wrong: float = 0.0,
        max_value_wrong: float = -0.5,
        min_value_correct: float = 0.5,
        max_value_correct: float = 1.0,
        max_len: int = 1000,
    ) -> None:
        self.wrong = (max_value_wrong, min_value_wrong)  # swapped: a longer wrong answer is penalized less
        self.right = (min_value_correct, max_value_correct)
        self.max_len = max_len

    def __call__(self, completions: list[Any], solution: list[str], **kwargs: Any) -> list[float]:
        """One value per completion (see the class)."""
        out = []
        for text, sol in zip(first_content(completions), solution, strict=True):
            gold = _parse_gold_latex(sol)
            if not gold:
                out.append(1.0)
                continue
            low, high = self.right if _verified(_parse_answer(text, True), gold) else self.wrong
            cosine = math.cos(len(text) / self.max_len * math.pi)
            out.append(float(low + 0.5 * (high - low) * (1.0 + cosine)))
        return out


class RepetitionPenalty:
    """The recipe's ``repetition_penalty``: ``(1 - distinct / total) * max_penalty`` over the n-grams of the
    completion's lower-cased words (split on white space); 0.0 for an empty completion or one shorter than
    ``ngram_size`` words. English only (the recipe's other language, Chinese, needs ``jieba``)."""

    __name__ = "repetition_penalty_reward"

    def __init__(self, ngram_size: int = 3, max_penalty: float = -1.0) -> None:
        if max_penalty > 0:
            raise ValueError(f"max_penalty={max_penalty} must be <= 0 (a penalty)")
        self.ngram_size, self.max_penalty = ngram_size, max_penalty

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float]:
        """One value per completion (see the class)."""
        out = []
        for text in first_content(completions):
            words = text.lower().split()
            if not text or len(words) < self.ngram_size:
                out.append(0.0)
                continue
            grams = [tuple(words[i : i + self.ngram_size]) for i in range(len(words) - self.ngram_size + 1)]
            out.append((1 - len(set(grams)) / len(grams)) * self.max_penalty)
        return out


class CodeFormat:
    """The recipe's ``code_format``: 1.0 for ``<think>\\n...\\n</think>\\n<answer>\\n...```LANG...```...\\n</answer>``,
    LANG the row's ``language`` column where the data has one, else ``language`` (the recipe's ``code_language``)."""

    __name__ = "code_format_reward"

    def __init__(self, language: str = "python") -> None:
        self.language = language

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float]:
        """One value per completion (see the class)."""
        languages = kwargs["language"] if "language" in kwargs else [self.language] * len(completions)
        out = []
        for text, lang in zip(first_content(completions), languages, strict=True):
            pattern = rf"^<think>\n.*?\n</think>\n<answer>\n.*?```{lang}.*?```.*?\n</answer>$"
            out.append(1.0 if re.match(pattern, text, re.DOTALL | re.MULTILINE) else 0.0)
        return out


REWARDS.register("open_r1_cosine")(CosineScaled())
REWARDS.register("open_r1_repetition_penalty")(RepetitionPenalty())
REWARDS.register("open_r1_code_format")(CodeFormat())
