"""Tests of the slot planner: its bounds against brute-force optima, validity, edge cases, budgets.

Run: ``python -m pytest tests/sampler/schedule/test_planner.py``. The optimum is found here independently, by
trying every one of the m^n assignments of small instances.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from infgrpo.sampler.schedule import planner
from infgrpo.sampler.schedule.planner import PlanTooLarge, estimate_fptas_work, fptas, lower_bound, lpt, makespan, plan

EPSILONS = (0.05, 0.2, 0.5)


def brute_force_opt(lengths: list[float], m: int, loads: list[float] | None = None) -> float:
    """The optimal makespan, over all m^n assignments."""
    best = math.inf
    for assign in itertools.product(range(m), repeat=len(lengths)):
        work = list(loads) if loads else [0] * m
        for j, i in enumerate(assign):
            work[i] += lengths[j]
        best = min(best, max(work))
    return best


def branch_and_bound_opt(lengths: list[float], m: int) -> float:
    """The optimal makespan by depth-first search over assignments (longest job first), pruned by the best
    found; faster than :func:`brute_force_opt` for n = 10, and checked against it in the test below."""
    jobs, work, best = sorted(lengths, reverse=True), [0.0] * m, [math.inf]

    def place(k: int) -> None:
        if k == len(jobs):
            best[0] = min(best[0], max(work))
            return
        for i in range(m):
            if work[i] + jobs[k] < best[0] and work[i] not in work[:i]:  # equal loads: same subtree
                work[i] += jobs[k]
                place(k + 1)
                work[i] -= jobs[k]

    place(0)
    return best[0]


def small_instances(count: int, seed: int, with_loads: bool) -> list[tuple[list[int], int, list[int] | None]]:
    """Random instances: n <= 8 integer jobs in 1..50 on 2 or 3 slots, optionally with initial loads."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        m = rng.choice((2, 3))
        lengths = [rng.randint(1, 50) for _ in range(rng.randint(0, 8))]
        out.append((lengths, m, [rng.randint(0, 60) for _ in range(m)] if with_loads else None))
    return out


def check_valid(p: planner.Plan, lengths: list[float], m: int, loads: list[float] | None = None) -> None:
    """Each job exactly once, longest first per slot, and the makespan field recomputed independently."""
    assert len(p.queues) == m
    assert sorted(j for q in p.queues for j in q) == list(range(len(lengths)))
    for q in p.queues:
        assert q == sorted(q, key=lambda j: (-lengths[j], j))
    span = max((loads[i] if loads else 0) + sum(lengths[j] for j in q) for i, q in enumerate(p.queues))
    assert p.makespan == pytest.approx(span, abs=1e-9)
    assert p.makespan == pytest.approx(makespan(p.queues, lengths, loads), abs=1e-9)


@pytest.mark.parametrize("with_loads", [False, True])
def test_fptas_and_lpt_bounds_against_brute_force(with_loads: bool) -> None:
    for lengths, m, loads in small_instances(200, seed=int(with_loads), with_loads=with_loads):
        opt = brute_force_opt(lengths, m, loads)
        lb = lower_bound(lengths, m, loads)
        assert lb <= opt + 1e-9
        for eps in EPSILONS:
            p = fptas(lengths, m, eps, loads)
            check_valid(p, lengths, m, loads)
            assert (p.method, p.guarantee) == ("fptas", 1 + eps)
            assert opt - 1e-9 <= p.makespan <= (1 + eps) * opt + 1e-9
            assert p.lower_bound == pytest.approx(lb) and p.lower_bound <= opt + 1e-9
        for improve in (False, True):
            p = lpt(lengths, m, loads, improve=improve)
            check_valid(p, lengths, m, loads)
            # Graham's bound without loads; with loads Lee's 3/2 - 1/(2m) (proved in the module docstring)
            bound = 4 / 3 - 1 / (3 * m) if not with_loads or not any(loads) else 3 / 2 - 1 / (2 * m)
            assert p.guarantee == pytest.approx(bound)
            assert opt - 1e-9 <= p.makespan <= bound * opt + 1e-9


def test_fptas_dynamic_program_alone_meets_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a useless upper bound (every job on slot 0) step 1 never shortcuts: the DP must do the work."""

    def worst_plan(p: list[float], m: int, init: list[float], improve: bool = True) -> planner.Plan:
        queues = [sorted(range(len(p)), key=lambda j: (-p[j], j))] + [[] for _ in range(m - 1)]
        return planner.Plan(queues, makespan(queues, p, init), planner._lower_bound(p, m, init), 1.0, "lpt")

    runs = []
    dp = planner._dp
    monkeypatch.setattr(planner, "_lpt", worst_plan)
    monkeypatch.setattr(planner, "_dp", lambda *a: runs.append(1) or dp(*a))
    rng = random.Random(7)
    for t in range(60):
        m, n = rng.choice((2, 3)), rng.randint(2, 7)
        lengths = [rng.uniform(1, 50) if t % 2 else rng.randint(1, 50) for _ in range(n)]
        loads = [rng.randint(0, 40) for _ in range(m)] if t % 3 == 0 else None
        opt = brute_force_opt(lengths, m, loads)
        for eps in EPSILONS:
            p = fptas(lengths, m, eps, loads)
            check_valid(p, lengths, m, loads)
            assert p.makespan <= (1 + eps) * opt + 1e-9
    assert len(runs) > 100  # the DP really ran


def test_rounding_error_stays_within_eps_lower_bound() -> None:
    """Step 2's unit: u (q + 1) <= eps LB, with q >= the most large jobs that fit below UB on one slot."""
    rng = random.Random(5)
    checked = 0
    for _ in range(300):
        m, lengths = rng.choice((2, 3)), [rng.uniform(1, 100) for _ in range(rng.randint(3, 9))]
        loads = [rng.uniform(0, 50) for _ in range(m)]
        p, _, init = planner._check(lengths, m, loads)
        base = planner._lpt(p, m, init)
        base = planner.Plan(base.queues, 1.5 * base.makespan, base.lower_bound, 1.0, "lpt")  # force the DP
        eps = rng.choice(EPSILONS)
        setup = planner._dp_setup(p, m, init, eps, base)
        if setup is None:
            continue
        large = [p[j] for j in setup.large]
        assert all(x > eps * base.lower_bound for x in large)
        fits = max(
            (
                len(c)
                for r in range(len(large) + 1)
                for c in itertools.combinations(large, r)
                if sum(c) < setup.ub - min(init)
            ),
        )
        assert setup.q >= fits
        assert setup.unit * (setup.q + 1) <= eps * base.lower_bound * (1 + 1e-12)
        for j in setup.large:
            assert 0 <= setup.keys[j] * setup.unit - p[j] < setup.unit * (1 + 1e-12)
        checked += 1
    assert checked > 100


def test_graham_tight_example() -> None:
    lengths = [3, 3, 2, 2, 2]  # LPT: 3+2+2 = 7 against 3+3 | 2+2+2 = 6
    assert lpt(lengths, 2, improve=False).makespan == 7
    assert lpt(lengths, 2).makespan == 6  # the swap of a 3 and a 2 repairs it
    for eps in EPSILONS:
        assert fptas(lengths, 2, eps).makespan == 6
    assert lower_bound(lengths, 2) == 6
    three = [5, 5, 4, 4, 3, 3, 3]  # m = 3: LPT 11, OPT 9
    assert lpt(three, 3, improve=False).makespan == 11
    assert lpt(three, 3).makespan == fptas(three, 3, 0.05).makespan == 9


def test_lower_bound_terms() -> None:
    assert lower_bound([4, 3, 3], 2) == 6  # p_2 + p_3 beats sum / m = 5
    assert lower_bound([5], 4, loads=[1, 2, 3, 4]) == 6  # the job waits for the emptiest slot
    assert lower_bound([5, 5], 2, loads=[0, 10]) == 10  # max load
    assert lower_bound([5, 5], 2, loads=[0, 4]) == 9  # distinct slots: l_(2) + p_2, or 0 + 5 + 5
    assert lower_bound([], 3, loads=[1, 2, 6]) == 6


def test_edge_cases() -> None:
    empty = plan([], 3)
    assert empty.queues == [[], [], []] and empty.makespan == 0 and empty.lower_bound == 0
    assert plan([], 2, loads=[3, 1]).makespan == 3
    many_slots = plan([4, 9, 1], 5)
    check_valid(many_slots, [4, 9, 1], 5)
    assert many_slots.makespan == 9 and sum(1 for q in many_slots.queues if q) == 3
    zeros = plan([0, 0, 0, 0], 2, method="fptas")
    check_valid(zeros, [0, 0, 0, 0], 2)
    assert zeros.makespan == 0
    one = plan([3, 1, 2], 1)
    assert one.queues == [[0, 2, 1]] and one.makespan == 6 and one.certified_ratio == 1.0
    assert lpt([5, 5, 5, 5], 2).queues == [[0, 2], [1, 3]]  # ties: lower index first, lower slot first


@pytest.mark.parametrize("method", ["auto", "lpt", "fptas"])
def test_deterministic(method: str) -> None:
    rng = random.Random(3)
    lengths = [rng.choice((64, 128, 256, 512)) for _ in range(40)]  # many duplicates
    loads = [rng.randint(0, 100) for _ in range(4)]
    first = plan(lengths, 4, method, 0.05, loads)
    assert plan(list(lengths), 4, method, 0.05, list(loads)) == first
    check_valid(first, lengths, 4, loads)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"method": "greedy"}, "method"),
        ({"epsilon": 0}, "epsilon"),
        ({"epsilon": -0.1}, "epsilon"),
        ({"epsilon": math.nan}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
        ({"num_slots": 0}, "num_slots"),
        ({"num_slots": 2.0}, "num_slots"),
        ({"num_slots": True}, "num_slots"),
        ({"lengths": [1, -2]}, "lengths"),
        ({"lengths": [1, math.nan]}, "lengths"),
        ({"lengths": [1, "x"]}, "lengths"),
        ({"loads": [0, 1, 2]}, "loads"),
        ({"loads": [0, -1]}, "loads"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict, field: str) -> None:
    args = {"lengths": [3, 2, 1], "num_slots": 2, "method": "auto", "epsilon": 0.1, "loads": None} | kwargs
    with pytest.raises(ValueError, match=field):
        plan(**args)


def test_fptas_rejects_bad_epsilon_and_slots() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        fptas([1, 2], 2, 0)
    with pytest.raises(ValueError, match="num_slots"):
        lpt([1, 2], 0)


def test_auto_on_4096_jobs_64_slots() -> None:
    """Thousands of jobs: lpt is certified within 1 + eps by the lower bound, so no DP runs."""
    rng = random.Random(0)
    lengths = [rng.randint(1, 1024) for _ in range(4096)]
    p = plan(lengths, 64, "auto")
    assert estimate_fptas_work(lengths, 64, 0.1) == 0
    assert (p.method, p.guarantee) == ("fptas", 1.1)
    assert p.queues == lpt(lengths, 64).queues and p.certified_ratio <= 1.001
    # with an epsilon too small for any certificate the DP over 4,096 large jobs is intractable: lpt
    tiny = plan(lengths, 64, "auto", epsilon=1e-6)
    assert estimate_fptas_work(lengths, 64, 1e-6) > planner.AUTO_TRY_FACTOR * planner.AUTO_MAX_WORK
    assert (tiny.method, tiny.queues) == ("lpt", p.queues)


def test_auto_picks_lpt_when_the_dp_is_too_large() -> None:
    rng = random.Random(7)
    for _ in range(200):  # 24 long-ish jobs on 8 slots, where lpt is not certified within 1.05
        lengths = [rng.randint(200, 1024) for _ in range(24)]
        base = lpt(lengths, 8)
        if base.makespan > 1.05 * base.lower_bound:
            break
    assert estimate_fptas_work(lengths, 8, 0.05) > planner.AUTO_TRY_FACTOR * planner.AUTO_MAX_WORK
    assert plan(lengths, 8, "auto", 0.05) == base


def test_estimate_bounds_the_dp_work() -> None:
    """fptas with max_work = the estimate never runs out: the estimate is an upper bound."""
    rng = random.Random(11)
    ran = 0
    for _ in range(40):
        lengths = [rng.randint(1, 1024) for _ in range(10)]
        work = estimate_fptas_work(lengths, 3, 0.01)
        ran += work > 0
        p = fptas(lengths, 3, 0.01, max_work=math.ceil(work))
        opt = branch_and_bound_opt(lengths, 3)
        assert p.makespan <= 1.01 * opt + 1e-9
        if _ < 3:
            assert opt == brute_force_opt(lengths, 3)
    assert ran > 10


def test_budget_exceeded_raises_in_fptas_and_falls_back_in_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    lengths = [5, 5, 4, 4, 3, 3, 3, 6, 7]
    assert estimate_fptas_work(lengths, 3, 0.001) > 0
    with pytest.raises(PlanTooLarge):
        fptas(lengths, 3, 0.001, max_work=1)
    monkeypatch.setattr(planner, "FPTAS_MAX_WORK", 1)
    fallback = plan(lengths, 3, "fptas", 0.001)
    assert fallback == lpt(lengths, 3)


def test_the_ptas_alias_is_refused_naming_the_field_and_the_valid_planners() -> None:
    """'ptas', the scheme's first name, was an alias of 'fptas' until 0.3: now an unknown planner, as any other."""
    from infgrpo.sampler import SamplerConfig

    with pytest.raises(ValueError, match=r"^method='ptas' is not known; valid: auto, lpt, fptas$"):
        plan([7, 6, 5, 4, 4], 2, "ptas")
    with pytest.raises(ValueError, match=r"^planner='ptas' is not known; valid: auto, lpt, fptas$"):
        SamplerConfig(planner="ptas")
