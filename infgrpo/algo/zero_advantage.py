"""Rows whose gradient is zero: a completion of advantage exactly 0, where the objective gives it no other term.

    reason = skip_reason(objective)     # None: the skip is exact for this objective; else why not (one line)
    skip = resolve_skip("auto", objective)   # update.skip_zero_advantage for objective: on where exact
    rows = trained_rows(advantages)     # the rows the update must run (the others add exactly 0)

**Why the skip is exact.** Write one row's contribution to a micro-batch's loss as ``N(term)``: the loss type's
normalizer (:mod:`infgrpo.algo.losses`) applied to the row's per-token term, with counts over the *whole* batch
(sequences, active tokens, ``sequences x max_completion_length``). Every policy term of
:mod:`infgrpo.algo.policy_terms` is the advantage times something finite::

    grpo, bnpo, dr_grpo, dapo, luspo   -min(c A, clip(coef) A)         (c = min(coef, delta) with delta)
    cispo                              -sg[min(coef, eps_high)] A logp
    sapo                               -sigmoid(tau (coef - 1)) 4 / tau A
    vespo                              -sg[phi(w)] A logp

so with ``A = 0`` the term is 0 for every ``logp``, and its gradient, ``A`` times the gradient of the factor, is
0 too. The masks that multiply the term (the off-policy sequence mask, the entropy mask, the rollout
correction's weights) keep it 0; the importance weight at either level (token, or GSPO's sequence ratio)
is the row's own, read by no other row. The normalizers are sums over rows divided by batch-wide counts:
a row whose term is 0 adds 0 to the sum whatever the counts, so leaving it out of the forward and
backward changes nothing **provided the counts still count it** (the update passes them; see
:func:`~infgrpo.update.step.accumulate_policy_gradients`). The entropy mask's quantile is also batch-wide:
its threshold comes from every row's entropies (a pass without gradients), the skipped rows included.

Not exact, so the skip is off (one line says why): ``beta > 0`` (the KL term ``beta kl(logp, ref)`` does not
vanish with ``A``) and the entropy bonus (``entropy_coef != 0`` or the adaptive schedule: ``-c H`` has a
gradient in every row). ``-0.0`` and ``+0.0`` add alike; a row with ``A = 0`` whose term would be NaN or
inf (an infinite importance weight) is the one case where running it would differ, by poisoning the
gradient. The advantage must be exactly 0: a group of equal rewards gets exactly 0 where its mean is
exact (rewards 0 / 1, or any values with a power-of-two group size); otherwise its rows are not skipped.

What the skipped rows no longer feed are statistics: the entropy, the clip ratios and the rollout/training
log-prob mismatch are then taken over the rows the update ran (``update/rows_trained`` of them).
"""

from __future__ import annotations

import torch

from infgrpo.algo.objective import Objective
from infgrpo.settings import ConfigError, resolve_auto


def skip_reason(objective: Objective) -> str | None:
    """Why skipping zero-advantage rows would change the gradient under ``objective``, or None (it is exact)."""
    if objective.beta != 0.0:
        return f"objective.beta={objective.beta}: the KL term gives a row of advantage 0 a gradient"
    if objective.entropy_bonus:
        return "the entropy bonus (objective.entropy_coef / use_adaptive_entropy) gives every row a gradient"
    return None


def resolve_skip(setting: str, objective: Objective, warn: bool = True) -> bool:
    """Whether the update skips zero-advantage rows under ``update.skip_zero_advantage`` = ``setting``.

    The one check of that field: 'on' where the skip is not exact for ``objective`` is a
    :class:`~infgrpo.settings.ConfigError` (``check_settings`` calls this with ``warn=False``, before anything
    loads); 'auto' there is off, and says in one line why (``warn``); 'off' is off.
    """
    return resolve_auto(
        setting,
        lambda: skip_reason(objective),
        lambda why: ConfigError(f"update.skip_zero_advantage='on' cannot be exact here: {why}; use 'auto' or 'off'"),
        "update.skip_zero_advantage" if warn else "",
        stacklevel=4,  # resolve_skip <- PolicyUpdate <- GRPOModule <- the module's caller
    )


def trained_rows(advantages: torch.Tensor, lengths: list[int] | None = None) -> list[int]:
    """Indices of the rows of ``advantages`` (N,) that are not exactly 0, ascending.

    When every row is 0, one row is still run (the shortest of ``lengths``, else row 0): its gradient is exactly
    0, and every parameter then gets its zero gradient, so the optimizer step sees what it would have seen
    (Adam's moments decay on a zero gradient, but skip a missing one), and every data-parallel rank runs a
    backward (DDP synchronizes there).
    """
    rows = torch.nonzero(advantages != 0).flatten().tolist()
    if rows or not len(advantages):
        return rows
    return [min(range(len(advantages)), key=lambda i: lengths[i]) if lengths is not None else 0]
