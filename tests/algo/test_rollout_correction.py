"""Rollout correction: each mode and cap by hand and against TRL's definition; the mismatch statistics."""

import math

import pytest
import torch

from infgrpo.algo import combine_mismatch, mismatch_metrics, mismatch_sums, rollout_correction_weights
from tests.algo.thread_ranks import run_ranks
from tests.algo.trl_reference import reference_importance_sampling_ratio

# policy - behaviour = log 2, log 0.5, log 1.2 on row 0; one token of log 1.5 on row 1; the rest is padding
F64 = torch.float64
POLICY = torch.tensor([[math.log(2.0), math.log(0.5), math.log(1.2), 9.0], [math.log(1.5), 5.0, 5.0, 5.0]], dtype=F64)
BEHAVIOUR = torch.tensor([[0.0, 0.0, 0.0, -9.0], [0.0, 0.0, 0.0, float("nan")]], dtype=F64)
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]], dtype=F64)


def weights(mode, lo, hi):
    return rollout_correction_weights(POLICY, BEHAVIOUR, MASK, mode, lo, hi)


def close(t, expected):
    return torch.allclose(t, torch.tensor(expected, dtype=t.dtype), rtol=0, atol=1e-12)


def test_token_modes_by_hand():
    # padding: ratio exp(0) = 1, whatever the log-probs there (and it is masked in the loss anyway)
    assert close(weights("token_truncate", 0.8, 1.5), [[1.5, 0.8, 1.2, 1.0], [1.5, 1, 1, 1]])
    assert close(weights("token_truncate", None, 1.5), [[1.5, 0.5, 1.2, 1.0], [1.5, 1, 1, 1]])
    assert close(weights("token_mask", 0.8, 1.5), [[0.0, 0.0, 1.2, 1.0], [1.5, 1, 1, 1]])
    assert close(weights("token_mask", 0.8, None), [[2.0, 0.0, 1.2, 1.0], [1.5, 1, 1, 1]])


def test_sequence_modes_by_hand():
    # row 0's ratio is 2 * 0.5 * 1.2 = 1.2 (a sum of log-differences, not a mean); row 1's is 1.5
    assert close(weights("sequence_truncate", None, 1.3), [[1.2], [1.3]])
    assert close(weights("sequence_truncate", 1.25, 3.0), [[1.25], [1.5]])
    assert close(weights("sequence_mask", None, 1.3), [[1.2], [0.0]])
    assert close(weights("sequence_mask", 1.25, None), [[0.0], [1.5]])


def test_unscored_tokens_get_no_correction_and_the_weights_carry_no_gradient():
    p = torch.tensor([[0.3, -0.2]], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([[float("nan"), 0.0]], dtype=torch.float64)
    w = rollout_correction_weights(p, b, torch.ones(1, 2, dtype=torch.float64), "token_truncate", None, 3.0)
    assert close(w, [[1.0, math.exp(-0.2)]]) and not w.requires_grad
    with pytest.raises(ValueError, match="rollout_correction='none' is not known; valid: token_truncate"):
        rollout_correction_weights(p, b, torch.ones(1, 2), "none", None, 3.0)


@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
@pytest.mark.parametrize("bounds", [(None, 1.05), (0.95, 1.05), (0.97, None)])
def test_every_mode_and_cap_equals_trls_definition(mode, bounds):
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(5, 8, generator=g, dtype=torch.float64)
    sampling = old + 0.05 * torch.randn(5, 8, generator=g, dtype=torch.float64)
    sampling[1, 2] = float("nan")
    mask = (torch.arange(8)[None] < torch.tensor([8, 3, 1, 6, 4])[:, None]).double()
    got = rollout_correction_weights(old, sampling, mask, mode, *bounds)
    want = reference_importance_sampling_ratio(old, sampling, mask, mode, *bounds)
    assert got.shape == want.shape == ((5, 1) if mode.startswith("sequence") else (5, 8))
    assert (got - want).abs().max() <= 1e-15
    diff = torch.nan_to_num((old - sampling) * mask)
    raw = torch.exp(diff.sum(-1, keepdim=True) if mode.startswith("sequence") else diff)
    assert (got != raw).any() and (got == raw).any()  # the bounds bite on this batch, and leave some alone


def test_mismatch_statistics_by_hand_and_over_micro_batches_and_ranks():
    s = mismatch_sums(POLICY, BEHAVIOUR, MASK)  # 4 completion tokens: |d| = log 2, log 2, log 1.2, log 1.5
    d = [math.log(2), math.log(2), math.log(1.2), math.log(1.5)]
    assert s.dtype == torch.float64
    assert mismatch_metrics(s) == pytest.approx(
        {
            "logprob_mismatch_mean": sum(d) / 4,
            "logprob_mismatch_max": math.log(2),
            "ratio_mean": (2 + 0.5 + 1.2 + 1.5) / 4,
        }
    )
    nan = mismatch_sums(torch.tensor([[0.1, 0.2]]), torch.tensor([[float("nan"), 0.0]]), torch.ones(1, 2))
    assert mismatch_metrics(nan) == pytest.approx(
        {"logprob_mismatch_mean": 0.2, "logprob_mismatch_max": 0.2, "ratio_mean": math.exp(0.2)}, rel=1e-6
    )  # an unscored token is left out, as TRL leaves it out of its logged difference
    empty = mismatch_sums(POLICY, BEHAVIOUR, torch.zeros_like(MASK))
    assert mismatch_metrics(empty) == {"logprob_mismatch_mean": 0.0, "logprob_mismatch_max": 0.0, "ratio_mean": 0.0}
    rows = [mismatch_sums(POLICY[i : i + 1], BEHAVIOUR[i : i + 1], MASK[i : i + 1]) for i in range(2)]
    assert torch.allclose(combine_mismatch(rows), s)  # micro-batches: sums add, the maximum is the largest
    got = run_ranks(2, lambda ranks, r: combine_mismatch([rows[r]], ranks))
    assert all(torch.allclose(t, s) for t in got)
