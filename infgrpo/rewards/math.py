"""Numeric answers: GSM8K ``#### 42``, ``\\boxed{42}`` or the last number, compared as numbers.

Extraction order for a completion: the number after the last ``####``, else the last ``\\boxed{..}``,
else the last number in the text. Thousands commas, ``$``, ``%``, trailing units and LaTeX
separators are ignored (``$1,234.50 dollars`` -> 1234.5, ``\\boxed{1{,}000}`` -> 1000), ``\\frac{a}{b}``
is a / b, and a hyphen between numbers is no minus sign (``pages 10-20`` -> 20). The reference is
read the same way from the row's ``answer`` field (GSM8K's "... #### 42").
"""

from __future__ import annotations

import re

from infgrpo.rewards.core import REWARDS

# A number not glued to a preceding digit (so "10-20" reads 10 and 20): thousands groups of exactly
# three digits ("1,234" but "1,2,3" is three numbers), an optional decimal part, an optional minus.
NUMBER = r"(?<![\d.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?<![\d.])-?\.\d+"
_HASH = re.compile(r"####\s*([^\n]*)")
_NUM = re.compile(NUMBER)
_FRAC = re.compile(r"^\s*(-?)[dt]?frac\{([^{}]*)\}\{([^{}]*)\}\s*$")  # after _normalize: no backslash
_IGNORED = ("{,}", "\\,", "\\!", "\\ ", "\\", "$", "%")  # LaTeX separators and spaces, escapes, units


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


def extract_number(text: str) -> float | None:
    """The final numeric answer of a text, or None when it has none."""
    hashes = _HASH.findall(text)
    if hashes and (value := _to_float(hashes[-1])) is not None:
        return value
    boxed = last_boxed(text)
    if boxed is not None and (value := _to_float(boxed)) is not None:
        return value
    nums = _NUM.findall(_normalize(text))
    return float(nums[-1].replace(",", "")) if nums else None


@REWARDS.register("numeric")
@REWARDS.register("gsm8k")
def numeric_reward(completions: list[str], metadata: list[dict]) -> list[float]:
    """1.0 when the completion's final number equals the reference answer (|diff| <= 1e-6)."""
    out = []
    for text, meta in zip(completions, metadata, strict=True):
        ref = extract_number(str(meta["answer"]))
        got = extract_number(text)
        out.append(1.0 if ref is not None and got is not None and abs(ref - got) <= 1e-6 else 0.0)
    return out
