"""Entropy: from logits, the batch-wide high-entropy mask (any split, any ranks), the adaptive coefficient."""

import math

import pytest
import torch

from infgrpo.algo import AdaptiveEntropyCoef, Objective, entropy_from_logits, entropy_threshold, high_entropy_mask
from infgrpo.algo.entropy import quantile
from tests.algo.thread_ranks import run_ranks

ENTROPY = torch.tensor([[0.1, 0.5, 0.9], [0.3, 0.7, 4.0]], dtype=torch.float64)  # 4.0 sits on padding
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
    # completion entropies 0.1 0.3 0.5 0.7 0.9; rho 0.4 keeps the top 40%: the 0.6 quantile = 0.5 + 0.4 * 0.2
    threshold = entropy_threshold([ENTROPY], [MASK], 0.4)
    assert threshold.item() == pytest.approx(0.58, abs=1e-15)
    assert high_entropy_mask(ENTROPY, MASK, threshold).tolist() == [[False, False, True], [False, True, False]]
    top = entropy_threshold([ENTROPY], [MASK], 0.0)  # rho 0: only the highest token (padding's 4.0 is not one)
    assert top.item() == 0.9 and high_entropy_mask(ENTROPY, MASK, top).sum() == 1
    everything = entropy_threshold([ENTROPY], [MASK], 1.0)
    assert high_entropy_mask(ENTROPY, MASK, everything).tolist() == MASK.bool().tolist()
    assert entropy_threshold([ENTROPY], [torch.zeros_like(MASK)], 0.2) is None  # no token: none is kept
    assert not high_entropy_mask(ENTROPY, MASK, None).any()


def test_threshold_does_not_depend_on_the_split_and_equals_torch_quantile():
    g = torch.Generator().manual_seed(0)
    e = torch.rand(10, 13, generator=g, dtype=torch.float64) * 5
    m = (torch.arange(13)[None] < torch.randint(1, 14, (10, 1), generator=g)).double()
    whole = entropy_threshold([e], [m], 0.2)
    assert torch.equal(whole, torch.quantile(e[m.bool()], 0.8))
    parts = [torch.tensor(r) for r in ([7, 0, 2], [5], [1, 3, 4, 6, 8, 9])]
    widths = [int(m[r].sum(1).max()) for r in parts]  # each micro-batch padded to its own longest row
    split = entropy_threshold(
        [e[r, :w] for r, w in zip(parts, widths, strict=True)],
        [m[r, :w] for r, w in zip(parts, widths, strict=True)],
        0.2,
    )
    assert torch.equal(split, whole)
    for q in (0.0, 0.13, 0.5, 0.77, 1.0):
        v = e[m.bool()]
        assert torch.equal(quantile(v, q), torch.quantile(v, q)), q


def test_quantile_of_bfloat16_values_ranks_in_double_precision():
    v = torch.cat([torch.zeros(3000), torch.ones(1)])  # rank 0.9999 x 3000 = 2999.7: 0.7 of the way to the 1
    want = torch.quantile(v.double(), 0.9999).to(torch.bfloat16)  # bfloat16 would round q itself to 1.0
    got = quantile(v.to(torch.bfloat16), 0.9999)
    assert got.dtype == torch.bfloat16 and got.item() == want.item() == torch.tensor(0.7, dtype=torch.bfloat16).item()
    assert quantile(v.to(torch.bfloat16), 1.0).item() == 1.0 and quantile(v, 0.0).item() == 0.0


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
