"""The synthetic task family of the embedded default: verifiable answers whose length varies.

Three kinds of prompt, each answered by one deterministic string:

- ``rev dcab``   -> ``bacd``          (reverse letters; answers of 2-12 tokens)
- ``dup abc``    -> ``aabbcc``        (double every letter; 4-20 tokens)
- ``count 7 31`` -> ``7 8 9 ... 31``  (count up; 1-89 tokens)

The answer's length is a function of the prompt, so a length predictor and a length-aware scheduler
have something to learn. The tokenizer is character level, so one character is one token.

Run ``python -m infgrpo.assets.task`` to print a few examples.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

LETTERS = "abcdefghij"
TASKS = ("rev", "dup", "count")


@dataclass(frozen=True)
class Problem:
    """One synthetic prompt with its verifiable answer."""

    task: str
    prompt: str
    answer: str

    def as_row(self) -> dict[str, str]:
        """The problem as a dataset row with columns ``task``, ``prompt`` and ``answer``."""
        return {"task": self.task, "prompt": self.prompt, "answer": self.answer}


def solve(prompt: str) -> str:
    """The correct answer of a synthetic prompt (raises ValueError on a malformed one)."""
    kind, _, rest = prompt.partition(" ")
    if kind == "rev":
        return rest[::-1]
    if kind == "dup":
        return "".join(ch * 2 for ch in rest)
    if kind == "count":
        lo, hi = (int(x) for x in rest.split())
        return " ".join(str(i) for i in range(lo, hi + 1))
    raise ValueError(f"not a synthetic prompt: {prompt!r} (kinds: {', '.join(TASKS)})")


def flawed(prompt: str) -> str:
    """A plausible wrong answer: the correct one stopped one item early (a one-number count gets one too many).

    The warm start imitates demonstrations that contain this flaw, so the tiny model samples both
    right and premature answers and GRPO has a reward signal to learn from.
    """
    kind = prompt.split(" ", 1)[0]
    answer = solve(prompt)
    if kind == "count":
        return answer.rsplit(" ", 1)[0] if " " in answer else answer + " " + str(int(answer) + 1)
    return answer[:-1]


def sample_problem(rng: random.Random, task: str | None = None) -> Problem:
    """Draws one problem; ``task`` picks the kind (uniform when None)."""
    task = task or rng.choice(TASKS)
    if task == "rev":
        body = "".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 12)))
    elif task == "dup":
        body = "".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 10)))
    elif task == "count":
        span = rng.randint(1, 30)
        lo = rng.randint(0, 99 - span + 1)
        body = f"{lo} {lo + span - 1}"
    else:
        raise ValueError(f"task={task!r} is not a synthetic task; valid: {', '.join(TASKS)}")
    prompt = f"{task} {body}"
    return Problem(task, prompt, solve(prompt))


def is_eval_prompt(prompt: str, eval_share: int = 10) -> bool:
    """Held-out split by a hash of the prompt text, so train and eval never share a prompt."""
    return int(hashlib.md5(prompt.encode()).hexdigest(), 16) % eval_share == 0


def make_split(n: int, split: str, seed: int) -> list[Problem]:
    """``n`` distinct problems of one split (``train`` or ``eval``), reproducible from ``seed``."""
    if split not in ("train", "eval"):
        raise ValueError(f"split={split!r}; valid: 'train', 'eval'")
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[Problem] = []
    while len(out) < n:
        p = sample_problem(rng)
        if p.prompt in seen or is_eval_prompt(p.prompt) != (split == "eval"):
            continue
        seen.add(p.prompt)
        out.append(p)
    return out


if __name__ == "__main__":
    for p in make_split(6, "train", seed=0):
        print(f"{p.prompt!r:24} -> {p.answer!r}   (flawed: {flawed(p.prompt)!r})")
