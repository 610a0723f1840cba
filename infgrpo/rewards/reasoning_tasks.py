"""The ``reasoning_gym`` reward: a reasoning-gym task's own verifier, ``score_answer``, on the extracted answer.

The answer of a completion is, by reasoning-gym's convention, the text inside its last
``<answer>...</answer>`` pair (``reasoning_gym.utils.extract_answer``: one space of padding inside
the tags is dropped, then the text is stripped). **Fallback** when the completion has no such pair:
where the reference answer is a number (``chain_sum``, ``basic_arithmetic``, ...), the last number in
the completion, as GSM8K-style graders read one ("The final answer is 19." -> "19"; thousands separators
dropped: "1,234" -> "1234"); otherwise its
last non-empty line, stripped (a model told "Give only the final answer." often writes just the
answer on its last line). A completion with no such text scores as no answer (None).
The score is the task's ``score_answer(answer, entry)`` in [0, 1]: 1 for a correct answer, some
tasks give partial credit (the default verifier gives ``len(reference) / len(answer)`` when the
reference is inside a longer answer).

The task's dataset is rebuilt from the row's ``metadata["reasoning_gym"] = {"task", "config"}``
(written by the ``reasoning_gym:<task>`` data source; a composite's row names its sub-task) with
``reasoning_gym.create_dataset(task, **config)``, once per process and construction. Rows of
reasoning-gym entries from elsewhere (``question``, ``answer``, ``metadata.source_dataset``, e.g. a
jsonl written from a dataset) are scored by the task built with its default settings.
"""

from __future__ import annotations

import json
import re
from typing import Any

from infgrpo.rewards.calls import completion_texts
from infgrpo.rewards.core import REWARDS
from infgrpo.rewards.math import NUMBER as WRITTEN_NUMBER

_TASKS: dict[str, Any] = {}  # json of (task, config) -> the rebuilt reasoning-gym dataset


def _reasoning_gym() -> Any:
    try:
        import reasoning_gym
    except ImportError as err:
        raise ImportError('the reasoning_gym reward needs reasoning-gym: pip install -e ".[tasks]"') from err
    return reasoning_gym


def task_dataset(meta: dict[str, Any]) -> Any:
    """The reasoning-gym dataset whose ``score_answer`` verifies the row ``meta`` (cached)."""
    maker = meta.get("reasoning_gym")
    if maker is None:
        source = (meta.get("metadata") or {}).get("source_dataset")
        if source is None:
            raise ValueError(
                "the reasoning_gym reward scores rows of a data.path: reasoning_gym:<task> source (or reasoning-gym "
                f"entries with metadata.source_dataset); this row has neither (no reasoning_gym column; metadata "
                f"{str(meta.get('metadata'))[:60]})"
            )
        maker = {"task": source, "config": {}}
    key = json.dumps(maker, sort_keys=True, default=str)
    if key not in _TASKS:
        _TASKS[key] = _reasoning_gym().create_dataset(maker["task"], **maker["config"])
    return _TASKS[key]


NUMBER = re.compile(r"-?\d+(?:\.\d+)?")  # a numeric reference answer
_WRITTEN = re.compile(WRITTEN_NUMBER)  # a number as written in a completion: "-3", "1,234", "0.5", ".5"


def extract_answer(completion: str, reference: str | None = None) -> str | None:
    """The answer of a completion: inside its last ``<answer>`` tags, else (see above) its last number when the
    ``reference`` answer is a number, else its last non-empty line."""
    tagged = _reasoning_gym().utils.extract_answer(completion)
    if tagged is not None:
        return tagged
    if reference is not None and NUMBER.fullmatch(str(reference).strip()):
        numbers = _WRITTEN.findall(completion)
        return numbers[-1].replace(",", "") if numbers else None
    lines = [line.strip() for line in completion.splitlines() if line.strip()]
    return lines[-1] if lines else None


@REWARDS.register("reasoning_gym")
def reasoning_gym_reward(
    completions: list[Any],
    answer: list[Any],
    question: list[str] | None = None,
    metadata: list[dict] | None = None,
    reasoning_gym: list[dict] | None = None,
    **kwargs: Any,
) -> list[float]:
    """The task's ``score_answer`` of each completion's extracted answer, in [0, 1] (1 = correct); ``question``,
    ``metadata`` and ``reasoning_gym`` are the rows' columns of those names (see the module docstring)."""
    n = len(completions)
    questions, metas, makers = question or [None] * n, metadata or [None] * n, reasoning_gym or [None] * n
    out = []
    for i, text in enumerate(completion_texts(completions)):
        entry = {"question": questions[i], "answer": answer[i], "metadata": metas[i] or {}}
        row = {"reasoning_gym": makers[i], "metadata": metas[i]} if makers[i] is not None else {"metadata": metas[i]}
        extracted = extract_answer(text, str(answer[i]))
        out.append(float(task_dataset(row).score_answer(extracted, entry)))
    return out
