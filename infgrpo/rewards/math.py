"""Numeric answers: GSM8K ``#### 42``, ``\\boxed{42}`` or the last number, compared as numbers.

Extraction order for a completion: the number after the last ``####``, else the last ``\\boxed{..}``,
else the last number in the text. Commas, currency signs, percent signs and trailing units are
ignored (``$1,234.50 dollars`` -> 1234.5). The reference is read the same way from the row's
``answer`` field (GSM8K's "... #### 42").
"""

from __future__ import annotations

import re

from infgrpo.rewards.core import REWARDS

NUMBER = r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+"
_HASH = re.compile(r"####\s*([^\n]*)")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUM = re.compile(NUMBER)


def _to_float(text: str) -> float | None:
    nums = _NUM.findall(text.replace("$", "").replace("%", ""))
    if not nums:
        return None
    try:
        return float(nums[0].replace(",", ""))
    except ValueError:
        return None


def extract_number(text: str) -> float | None:
    """The final numeric answer of a text, or None when it has none."""
    hashes = _HASH.findall(text)
    if hashes and (value := _to_float(hashes[-1])) is not None:
        return value
    boxed = _BOXED.findall(text)
    if boxed and (value := _to_float(boxed[-1])) is not None:
        return value
    nums = _NUM.findall(text.replace("$", ""))
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
