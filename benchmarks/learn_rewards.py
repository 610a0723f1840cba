"""The rewards of ``bench learn --format trl --recipe boxed``, written once in TRL's reward convention.

    boxed_format_reward(completions=[[{"role": "assistant", "content": "so \\boxed{7}"}]])   # [1.0]

Both trainers call the same function: TRL as one of its ``reward_funcs`` (the function itself), infgrpo by its
import path, :data:`FORMAT_REWARD` (``rewards.functions``). Beside it both use TRL's own
``trl.rewards.accuracy_reward``; the weights are 1 and 1 (:data:`RECIPE_REWARDS`).
"""

from __future__ import annotations

from typing import Any

BOXED = "\\boxed{"
FORMAT_REWARD = "benchmarks.learn_rewards:boxed_format_reward"
"""The import path of :func:`boxed_format_reward` (how infgrpo names it in ``rewards.functions``)."""
ACCURACY_REWARD = "trl.rewards:accuracy_reward"
"""TRL's own accuracy reward, by its import path."""
RECIPE_REWARDS = {FORMAT_REWARD: 1.0, ACCURACY_REWARD: 1.0}
"""``--recipe boxed``'s rewards and weights, in the order TRL receives them (``reward_funcs``, ``reward_weights``)."""


def boxed_body(text: str) -> str | None:
    """The body of the one ``\\boxed{...}`` in ``text`` (nested braces kept), or None when ``text`` has none, more
    than one, or an unclosed one."""
    if text.count(BOXED) != 1:
        return None
    start = text.index(BOXED) + len(BOXED)
    depth = 1
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    return None


def boxed_format_reward(completions: list, **kwargs: Any) -> list[float]:
    """1.0 for a completion whose text (a conversational completion: its last message's content) holds exactly one
    ``\\boxed{...}`` with a non-empty body, else 0.0 (TRL's reward signature; the other columns are ignored)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if (body := boxed_body(t)) is not None and body.strip() else 0.0 for t in texts]
