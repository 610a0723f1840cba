"""The calculator task of the tool-calling tiny model: add two large numbers, with an ``add`` tool.

A prompt is one user message, ``[{"role": "user", "content": "12345+67890?"}]``, with operands of 4 to 6
digits; the answer is the sum as digits (``"80235"``). The ~0.6M-parameter character model cannot add such
numbers itself, but it can copy digits: it solves the task by calling ``add`` and copying the result.
Rendered with the compact chat template and ``tools=[add]``, one whole exchange reads::

    <|im_start|>system
    tools: add(a,b)<|im_end|>
    <|im_start|>user
    12345+67890?<|im_end|>
    <|im_start|>assistant
    <tool_call>
    {"name": "add", "arguments": {"a": 12345, "b": 67890}}
    </tool_call><|im_end|>
    <|im_start|>user
    <tool_response>
    80235
    </tool_response><|im_end|>
    <|im_start|>assistant
    80235<|im_end|>

The rewards follow TRL's convention for conversational rows: ``completions[i]`` is the list of messages the
model's turns produced (assistant, tool, ..., assistant). The model is built by
``python -m infgrpo.builds.tools``. Run ``python -m infgrpo.assets.calculator`` to print a few rows.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from infgrpo.assets.task import is_eval_prompt

DIGITS = (4, 6)
"""The smallest and largest number of digits of an operand."""

_CALL = re.compile(r"<tool_call>\n(\{.*\})\n</tool_call>", re.DOTALL)


def add(a: int, b: int) -> int:
    """Adds two integers.

    Args:
        a: The first number.
        b: The second number.

    Returns:
        The sum a + b.
    """
    return a + b


def _operand(rng: random.Random) -> int:
    digits = rng.randint(*DIGITS)
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def make_split(n: int, seed: int, split: str = "train") -> list[dict[str, Any]]:
    """``n`` distinct rows ``{"prompt": [user message], "answer": "<sum>"}`` of one split, reproducible from ``seed``.

    ``split`` is ``"train"`` or ``"eval"``; the two never share a prompt (a hash of its text decides, as in
    :func:`infgrpo.assets.task.is_eval_prompt`).
    """
    if split not in ("train", "eval"):
        raise ValueError(f"split={split!r}; valid: 'train', 'eval'")
    rng = random.Random(seed)
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        a, b = _operand(rng), _operand(rng)
        text = f"{a}+{b}?"
        if text in seen or is_eval_prompt(text) != (split == "eval"):
            continue
        seen.add(text)
        rows.append({"prompt": [{"role": "user", "content": text}], "answer": str(a + b)})
    return rows


def operands(prompt: list[dict[str, Any]]) -> tuple[int, int]:
    """The two operands of a row's prompt (its last user message ``"a+b?"``)."""
    a, b = prompt[-1]["content"].rstrip("?").split("+")
    return int(a), int(b)


def tool_call_message(a: int, b: int) -> dict[str, Any]:
    """The assistant message that calls ``add(a, b)``, in the chat template's ``tool_calls`` format."""
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": a, "b": b}}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def demonstration(prompt: list[dict[str, Any]], guess: str | None = None) -> list[dict[str, Any]]:
    """The messages of one demonstrated exchange after ``prompt``.

    Without ``guess``: the whole tool exchange (call with the operands copied, the tool's true sum, the answer
    copying it). With ``guess``: a direct answer ``guess`` and no call.
    """
    if guess is not None:
        return [{"role": "assistant", "content": guess}]
    a, b = operands(prompt)
    total = str(add(a, b))
    return [
        tool_call_message(a, b),
        {"role": "tool", "name": "add", "content": total},
        {"role": "assistant", "content": total},
    ]


def parse_tool_call(text: str) -> dict[str, Any] | None:
    """The call ``{"name": ..., "arguments": {...}}`` of an assistant turn's text, or None when it holds none.

    ``text`` is the turn as generated, up to its ``<|im_end|>``. A call is well formed when the turn is one
    ``<tool_call>`` block of JSON with a string ``name`` and an object ``arguments``; anything else (a direct
    answer, broken JSON) is None. This is stricter than ``tokenizer.parse_response`` (which TRL's tool loop uses):
    that also reads a call after some text, or one whose ``arguments`` key is misspelt.
    """
    match = _CALL.fullmatch(text.removesuffix("<|im_end|>").strip())
    if match is None:
        return None
    try:
        call = json.loads(match.group(1))
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict):
        return None
    well_formed = isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict)
    return call if well_formed else None


def _final_answer(completion: list[dict[str, Any]] | str) -> str:
    if isinstance(completion, str):
        return completion
    turns = [m for m in completion if m.get("role") == "assistant"]
    return (turns[-1].get("content") or "") if turns else ""


def correct(completions: list, answer: list[str], **kwargs: Any) -> list[float]:
    """Reward: 1.0 when the last assistant message's content is the sum (``answer``), else 0.0.

    ``completions[i]`` is a list of messages (a string completion is taken as the answer itself).
    """
    return [float(_final_answer(c).strip() == a) for c, a in zip(completions, answer, strict=True)]


def called_tool(completions: list, **kwargs: Any) -> list[float]:
    """Metric: 1.0 when some assistant message of the completion holds a tool call, else 0.0.

    Shaped as a reward function, so it can be logged beside ``correct`` with weight 0.
    """
    return [
        float(not isinstance(c, str) and any(m.get("role") == "assistant" and m.get("tool_calls") for m in c))
        for c in completions
    ]


if __name__ == "__main__":
    for row in make_split(4, seed=0):
        print(row["prompt"][-1]["content"], "->", row["answer"], demonstration(row["prompt"]))
