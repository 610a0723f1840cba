"""Math answers through ``math-verify``: ``math`` (as TRL's ``accuracy_reward``) and ``gsm8k`` / ``numeric``.

``math`` is math-verify end to end, computing what TRL 1.16's ``accuracy_reward`` computes: the
reference (the row's ``answer``) is read by ``math_verify.parse`` with its defaults; the completion
by LaTeX extraction only (``\\boxed{}`` first, then ``$...$`` and other LaTeX environments; bare text
numbers do not count), the first match; the reward is ``verify(reference, completion)`` (1.0 or
0.0). A reference that math-verify cannot read gives None (the reward does not apply to that row: left out of
its sum, as TRL does). Equal values in other forms match:
``\\frac{1}{2}`` and ``0.5``, ``2^{10}`` and ``1024``, sets, intervals, ``12\\%`` and ``0.12``.

``gsm8k`` / ``numeric`` compare final *numbers* (equal within 1e-6). The final answer of a text is
the first number after its last ``####`` (GSM8K's convention), else the last ``\\boxed{..}``, else the
last number; the reference is read the same way from the row's ``answer`` (GSM8K's "... #### 42").
A boxed answer is read by math-verify (``\\frac``, ``\\sqrt``, powers, ``\\times``:
``\\boxed{2^{10}}`` is 1024), after the separators below are removed. **Hand-written, and why**
(:func:`extract_number`; ``tests/rewards`` keeps the cases):

- the choice of the answer span: math-verify has no ``####`` anchor and takes the *last* expression
  (``#### 72 and then 5 more`` reads 5);
- bare numbers in text: math-verify reads ``pages 10-20`` as 10 - 20, ``items 1,2,3`` as 1.2, finds
  nothing in ``\u22125`` (Unicode minus) and reads ``1\\,000`` as 1*0. Here a hyphen between numbers
  is no minus sign, commas count only in groups of three digits, and ``$``, ``%``, trailing units
  and the LaTeX separators ``{,}``, ``\\,``, ``\\!`` are ignored (``$1,234.50 dollars`` -> 1234.5);
- percentages: ``12%`` is 12 here (GSM8K's references are bare numbers), not math-verify's 0.12;
- a fallback where math-verify reads no real number from a box (``\\boxed{x = 3}`` -> 3).
"""

from __future__ import annotations

import re
import threading
from typing import Any

from infgrpo.rewards.calls import completion_texts
from infgrpo.rewards.core import REWARDS

# A number not glued to a preceding digit (so "10-20" reads 10 and 20): thousands groups of exactly
# three digits ("1,234" but "1,2,3" is three numbers), an optional decimal part, an optional minus.
NUMBER = r"(?<![\d.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?<![\d.])-?\.\d+"
_HASH = re.compile(r"####\s*([^\n]*)")
_NUM = re.compile(NUMBER)
_FRAC = re.compile(r"^\s*(-?)[dt]?frac\{([^{}]*)\}\{([^{}]*)\}\s*$")  # after _normalize: no backslash
_SEPARATORS = ("{,}", "\\,", "\\!", "\\ ", "\\$", "$", "\\%", "%")  # LaTeX separators and spaces, units
_IGNORED = (*_SEPARATORS, "\\")  # for the hand-written reading: backslash escapes too


def _normalize(text: str) -> str:
    """Unicode minus as ``-``; LaTeX ``{,}``, ``\\,``, ``\\!``, backslash escapes, ``$`` and ``%`` removed."""
    text = text.replace("\u2212", "-")
    for token in _IGNORED:
        text = text.replace(token, "")
    return text


def _to_float(text: str) -> float | None:
    text = _normalize(text)
    if frac := _FRAC.match(text):  # \frac{a}{b}, \dfrac, \tfrac
        num, den = _to_float(frac.group(2)), _to_float(frac.group(3))
        if num is not None and den:
            return (-1 if frac.group(1) else 1) * num / den
    nums = _NUM.findall(text)
    if not nums:
        return None
    return float(nums[0].replace(",", ""))


def last_boxed(text: str) -> str | None:
    """The contents of the last ``\\boxed{...}`` of ``text``, nested braces included; None if none closes."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def _timeout(seconds: int) -> int | None:
    """math-verify's timeouts use ``signal.alarm``, which works only in the main thread: None elsewhere."""
    return seconds if threading.current_thread() is threading.main_thread() else None


def boxed_value(content: str) -> float | None:
    """The real number math-verify reads from a box's LaTeX ``content`` (separators removed), else None."""
    from math_verify import parse

    for token in _SEPARATORS:
        content = content.replace(token, "")
    for value in parse("\\boxed{" + content.replace("\u2212", "-") + "}", parsing_timeout=_timeout(5)):
        if not isinstance(value, str) and getattr(value, "is_number", False):
            try:
                return float(value)
            except TypeError:  # a complex number
                return None
    return None


def extract_number(text: str) -> float | None:
    """The final numeric answer of a text, or None when it has none (see the module docstring)."""
    hashes = _HASH.findall(text)
    if hashes and (value := _to_float(hashes[-1])) is not None:
        return value
    boxed = last_boxed(text)
    if boxed is not None and boxed.strip():
        value = boxed_value(boxed)
        if value is None:
            value = _to_float(boxed)
        if value is not None:
            return value
    nums = _NUM.findall(_normalize(text))
    return float(nums[-1].replace(",", "")) if nums else None


@REWARDS.register("numeric")
@REWARDS.register("gsm8k")
def numeric_reward(completions: list[Any], answer: list[Any], **kwargs: Any) -> list[float]:
    """1.0 when the completion's final number equals the reference ``answer``'s (``|diff| <= 1e-6``)."""
    out = []
    for text, reference in zip(completion_texts(completions), answer, strict=True):
        ref = extract_number(str(reference))
        got = extract_number(text)
        out.append(1.0 if ref is not None and got is not None and abs(ref - got) <= 1e-6 else 0.0)
    return out


@REWARDS.register("math")
def math_reward(completions: list[Any], answer: list[Any], **kwargs: Any) -> list[float | None]:
    """``math_verify.verify`` of the reference and the completion's LaTeX answer: 1.0, 0.0, or None (no reference)."""
    from math_verify import LatexExtractionConfig, LatexNormalizationConfig, parse, verify

    latex_only: list[Any] = [
        LatexExtractionConfig(
            normalization_config=LatexNormalizationConfig(units=True),
            boxed_match_priority=0,  # \boxed{} before any other LaTeX
            try_extract_without_anchor=False,
        )
    ]
    out: list[float | None] = []
    for text, reference in zip(completion_texts(completions), answer, strict=True):
        gold = parse(str(reference), parsing_timeout=_timeout(10))
        if not gold:
            out.append(None)
            continue
        answer = parse(text, extraction_config=latex_only, extraction_mode="first_match", parsing_timeout=_timeout(10))
        out.append(float(verify(gold, answer, timeout_seconds=_timeout(5))))
    return out
