"""Length traces for the scheduling benchmark: synthetic distributions, prediction noise, and real
rollouts of the tiny default.

Synthetic lengths are drawn per prompt (``num_prompts`` x ``group_size``, prompt-major):

- ``uniform``: L ~ U{1, ..., max_new_tokens}, independent of the prompt.
- ``long-tailed``: each prompt has a median m_p ~ LogNormal(log(max/8), 0.5); its samples are
  LogNormal(log m_p, 0.9), capped at max_new_tokens (the cap is hit now and then, as in reasoning
  rollouts where a few completions run to the limit).
- ``bimodal``: 60% short answers N(0.08 max, 0.03 max), 40% long ones N(0.6 max, 0.2 max), clipped.

Prediction levels (``noisy_predictions``): ``oracle`` (the true length), ``noise-0.25/0.5/1.0``
(true length x exp(sigma z): a per-sequence predictor of that log-error), ``group-mean`` (each
prompt's true mean length: the best any prompt-level predictor can do) and ``useless`` (a constant).
"""

from __future__ import annotations

import math
import random

DISTRIBUTIONS = ("uniform", "long-tailed", "bimodal")
NOISE_LEVELS = ("oracle", "noise-0.25", "noise-0.5", "noise-1.0", "group-mean", "useless")


def synthetic_lengths(dist: str, num_prompts: int, group_size: int, max_new_tokens: int, seed: int) -> list[int]:
    """(num_prompts * group_size,) lengths in [1, max_new_tokens], prompt-major."""
    rng = random.Random(seed)
    top = max_new_tokens
    out = []
    for _ in range(num_prompts):
        median = math.exp(rng.gauss(math.log(top / 8), 0.5))
        for _ in range(group_size):
            if dist == "uniform":
                n = rng.randint(1, top)
            elif dist == "long-tailed":
                n = round(math.exp(rng.gauss(math.log(median), 0.9)))
            elif dist == "bimodal":
                n = round(rng.gauss(0.08 * top, 0.03 * top) if rng.random() < 0.6 else rng.gauss(0.6 * top, 0.2 * top))
            else:
                raise ValueError(f"dist={dist!r} is not known; valid: {', '.join(DISTRIBUTIONS)}")
            out.append(min(max(n, 1), top))
    return out


def noisy_predictions(lengths: list[int], group_size: int, level: str, seed: int) -> list[float]:
    """Predicted lengths (one per sequence) at a prediction quality ``level`` (see module docstring)."""
    rng = random.Random(seed + 1)
    if level == "oracle":
        return [float(n) for n in lengths]
    if level.startswith("noise-"):
        sigma = float(level.split("-", 1)[1])
        return [n * math.exp(sigma * rng.gauss(0, 1)) for n in lengths]
    if level == "group-mean":
        out = []
        for p in range(0, len(lengths), group_size):
            g = lengths[p : p + group_size]
            out += [sum(g) / len(g)] * len(g)
        return out
    if level == "useless":
        return [1.0] * len(lengths)
    raise ValueError(f"level={level!r} is not known; valid: {', '.join(NOISE_LEVELS)}")
