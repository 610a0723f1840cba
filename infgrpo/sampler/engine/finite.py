"""Non-finite logits, seen in what the host reads back anyway: the sampled tokens' log-probs.

    check_logprobs(out[running_slots, 1], "decode step 12")   # raises NonFiniteLogitsError on a NaN log-prob

A model whose weights or activations overflowed (a float16 model past 65504, weights a diverging update made
NaN) gives NaN or infinite logits. Sampling turns them into tokens inside the vocabulary and NaN log-probs
(:func:`~infgrpo.sampler.engine.sampling.sample_tokens`); finite logits always give a finite log-prob. The
engine already copies every step's tokens and log-probs to the host, so checking them there costs no device
work and no host synchronization: numpy over the (S,) log-probs of the running slots, once per step, and once
over the first tokens of each prefill.

The sampler knows nothing of training: the error says what went wrong and where; the caller (the
LightningModule) adds which of its settings likely caused it.
"""

from __future__ import annotations

import numpy as np


class NonFiniteLogitsError(RuntimeError):
    """The policy's logits were NaN or infinite while sampling: at ``where`` (e.g. ``"decode step 12"``, ``"the
    prefill"``), ``rows`` of ``total`` ``unit`` (sequences, prompts) had a non-finite log-prob."""

    def __init__(self, where: str, rows: int, total: int, unit: str = "sequences") -> None:
        self.where, self.rows, self.total, self.unit = where, rows, total, unit
        super().__init__(
            f"non-finite logits at {where}: the model's logits were NaN or infinite for {rows} of {total} {unit} "
            "(their sampled tokens' log-probs came out NaN), so the completions would be noise. The "
            "weights or the activations overflowed: a float16 model overflows past 65504 (bfloat16 or float32 "
            "do not), and an update that diverged leaves NaN weights (check torch.isfinite on the parameters)."
        )


def check_logprobs(logprobs: np.ndarray, where: str, unit: str = "sequences") -> None:
    """Raises :class:`NonFiniteLogitsError` naming ``where`` unless every one of ``logprobs`` (n,) is finite: the
    running slots' log-probs of a decode step, or one sample's of each prompt of a prefill (``unit``: what a
    row is)."""
    finite = np.isfinite(logprobs)
    if not finite.all():
        raise NonFiniteLogitsError(where, int(finite.size - finite.sum()), int(finite.size), unit)
