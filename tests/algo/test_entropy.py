"""Entropy: from logits, the batch-wide high-entropy mask (any split, any ranks), the adaptive coefficient."""

import math

import pytest
import torch

from infgrpo.algo import AdaptiveEntropyCoef, Objective, entropy_from_logits, entropy_threshold, high_entropy_mask
from infgrpo.algo.entropy import quantile
from tests.algo.thread_ranks import run_ranks

ENTROPY = torch.tensor([[0.125, 0.625, 1.125], [0.375, 0.875, 4.0]], dtype=torch.float64)  # 4.0 sits on padding
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)


def test_entropy_from_logits_is_minus_sum_p_log_p_at_the_temperature():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    for t in (1.0, 0.5):
        p = [[math.exp(z / t) for z in row] for row in logits.tolist()]
        want = [-sum(x / sum(row) * math.log(x / sum(row)) for x in row) for row in p]
        assert entropy_from_logits(logits, t).tolist() == pytest.approx(want, abs=1e-14)
    assert entropy_from_logits(logits[1:], 0.0).item() == pytest.approx(math.log(3), abs=1e-15)  # uniform: log V
    assert entropy_from_logits(logits.to(torch.bfloat16)).dtype == torch.float32


def test_threshold_and_mask_by_hand():
    # completion entropies 0.125 0.375 0.625 0.875 1.125 (exact in float32); rho 0.4 keeps the top 40%: the 0.6
    # quantile = 0.625 + 0.4 * 0.25, ranked and interpolated in float32 as torch.quantile (rank 0.6f * 4)
    threshold = entropy_threshold([ENTROPY], [MASK], 0.4)
    assert threshold.dtype == torch.float32 and threshold.item() == pytest.approx(0.725, abs=1e-7)
    assert high_entropy_mask(ENTROPY, MASK, threshold).tolist() == [[False, False, True], [False, True, False]]
    top = entropy_threshold([ENTROPY], [MASK], 0.0)  # rho 0: only the highest token (padding's 4.0 is not one)
    assert top.item() == 1.125 and high_entropy_mask(ENTROPY, MASK, top).sum() == 1
    everything = entropy_threshold([ENTROPY], [MASK], 1.0)
    assert high_entropy_mask(ENTROPY, MASK, everything).tolist() == MASK.bool().tolist()
    assert entropy_threshold([ENTROPY], [torch.zeros_like(MASK)], 0.2) is None  # no token: none is kept
    assert not high_entropy_mask(ENTROPY, MASK, None).any()


def test_a_float64_tie_with_the_quantile_falls_as_float32_rounds_it():
    """TRL rounds the entropies to float32 before its quantile: a float64 entropy on the median is dropped
    when its float32 rounding is above it, kept when below (the issue's case: 1.1543859122 -> 1.1543859243)."""
    for tie, kept in ((1.1543859122, 2), (1.1543859322, 3)):  # float32: 1.15438592434 above, resp. below
        rounded = torch.tensor(tie, dtype=torch.float64).float().double().item()
        assert (rounded > tie) == (kept == 2)
        e = torch.tensor([[0.5, tie, 2.0, 1.0, 3.0]], dtype=torch.float64)
        m = torch.ones_like(e)
        threshold = entropy_threshold([e], [m], 0.5)  # the median of 5: the tie itself
        assert threshold.item() == rounded
        assert high_entropy_mask(e, m, threshold).sum().item() == kept


def test_threshold_does_not_depend_on_the_split_and_equals_torch_quantile_in_float32():
    g = torch.Generator().manual_seed(0)
    e = torch.rand(10, 13, generator=g, dtype=torch.float64) * 5
    m = (torch.arange(13)[None] < torch.randint(1, 14, (10, 1), generator=g)).double()
    whole = entropy_threshold([e], [m], 0.2)
    assert torch.equal(whole, torch.quantile(e[m.bool()].float(), 0.8))  # TRL: entropies[mask].float()
    parts = [torch.tensor(r) for r in ([7, 0, 2], [5], [1, 3, 4, 6, 8, 9])]
    widths = [int(m[r].sum(1).max()) for r in parts]  # each micro-batch padded to its own longest row
    split = entropy_threshold(
        [e[r, :w] for r, w in zip(parts, widths, strict=True)],
        [m[r, :w] for r, w in zip(parts, widths, strict=True)],
        0.2,
    )
    assert torch.equal(split, whole)
    assert torch.equal(entropy_threshold([e.float()], [m], 0.2), whole)
    assert torch.equal(entropy_threshold([e.to(torch.bfloat16)], [m], 0.2), torch.quantile(
        e.to(torch.bfloat16)[m.bool()].float(), 0.8
    ))  # fmt: skip


def test_quantile_equals_torch_quantile_bit_for_bit_where_float32_ranks_differ_from_double():
    g = torch.Generator().manual_seed(2)
    float32_rank_mattered = 0
    for _ in range(400):
        n = int(torch.randint(1, 3000, (1,), generator=g))
        q = float(torch.rand(1, generator=g, dtype=torch.float64))
        for dtype in (torch.float32, torch.float64):
            v = torch.rand(n, generator=g, dtype=dtype) * 3
            want = torch.quantile(v, q)
            assert torch.equal(quantile(v, q), want), (n, q, dtype)
            exact = q * (n - 1)  # the rank in double precision: another threshold for float32 values
            lo, hi = torch.sort(v).values[[int(exact), min(int(exact) + 1, n - 1)]]
            other = torch.lerp(lo, hi, torch.tensor(exact - int(exact), dtype=dtype))
            float32_rank_mattered += dtype == torch.float32 and not torch.equal(other, want)
    assert float32_rank_mattered > 10  # these cases would fail a quantile ranked in double precision
    v = torch.tensor([0.0, 1.0])
    assert quantile(v, 1.0).item() == 1.0 and quantile(v, 0.0).item() == 0.0 and quantile(v[:1], 0.3).item() == 0.0


def test_threshold_over_ranks_of_unequal_token_counts_equals_one_process():
    g = torch.Generator().manual_seed(1)
    e = torch.rand(9, 6, generator=g, dtype=torch.float64) * 3
    m = (torch.arange(6)[None] < torch.tensor([6, 1, 3, 2, 5, 4, 6, 1, 2])[:, None]).double()
    one = entropy_threshold([e], [m], 0.2)
    shards = [slice(0, 3), slice(3, 6), slice(6, 9)]  # 10, 11 and 9 tokens
    got = run_ranks(3, lambda ranks, r: entropy_threshold([e[shards[r]]], [m[shards[r]]], 0.2, ranks))
    assert all(torch.equal(t, one) for t in got)


def test_adaptive_coefficient_schedule_by_hand():
    c = AdaptiveEntropyCoef(coef=0.1, target=1.0, coef_min=0.0, coef_max=0.12, delta=0.05)
    steps = []
    for entropy_sum, tokens in [(3.0, 2), (0.8, 1), (1.0, 1), (5.0, 1), (4.0, 1), (4.0, 1), (0.0, 0)]:
        applied = c.applied()  # the coefficient used during the step, from the previous step's entropy
        mean = c.update(entropy_sum, tokens)
        steps.append((applied, mean, c.coef))
    assert [pytest.approx(s) for s in steps] == (
        [
            (0.0, 1.5, 0.05),  # first step: no measurement yet (+inf), nothing applied; 1.5 > 1: down
            (0.0, 0.8, 0.10),  # last entropy 1.5 > target: gated off; 0.8 <= 1: up
            (0.10, 1.0, 0.12),  # on; at the target counts as below: up, capped at max
            (0.12, 5.0, 0.07),
            (0.0, 4.0, 0.02),
            (0.0, 4.0, 0.0),  # floored at min
            (0.0, 0.0, 0.05),  # no token: entropy 0 (TRL divides by max(count, 1))
        ]
    )


def test_adaptive_coefficient_state_round_trip_continues_the_schedule():
    a = AdaptiveEntropyCoef.from_objective(Objective(use_adaptive_entropy=True, entropy_coef=0.3, entropy_target=2.0))
    assert (a.coef, a.target, a.coef_min, a.coef_max, a.delta, a.last_entropy) == (0.3, 2.0, 0.0, 1.0, 0.005, math.inf)
    a.update(1.5, 1)
    state = a.state_dict()
    assert state == {"entropy_coef": pytest.approx(0.305), "last_world_entropy": 1.5}  # TRL's checkpoint keys
    b = AdaptiveEntropyCoef.from_objective(Objective(use_adaptive_entropy=True, entropy_coef=0.3, entropy_target=2.0))
    b.load_state_dict(state)
    assert b.applied() == a.applied() == pytest.approx(0.305)
    assert b.update(7.0, 2) == a.update(7.0, 2) and b.coef == a.coef == pytest.approx(0.3)
    assert AdaptiveEntropyCoef.from_objective(Objective(entropy_coef=0.1)) is None  # static: no state
