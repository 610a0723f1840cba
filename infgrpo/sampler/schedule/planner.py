"""Planner: assign predicted completion lengths to KV slots so that the busiest slot finishes early.

This is P||Cmax, identical-machine scheduling: n jobs (predicted decode steps) go to m machines (slots),
each slot runs its jobs one after another, and the makespan (the busiest slot's work) is minimized.
A slot may start busy: ``loads[i]`` is the remaining work of the sequence already running in it, and
the makespan is then ``max_i loads[i] + (work assigned to i)``. Pure functions, stdlib only::

    p = plan([7, 6, 5, 4, 4], num_slots=2)    # "auto": the fptas where tractable, else lpt
    p.queues, p.makespan, p.method            # [[2, 3, 4], [0, 1]], 13.0, 'fptas'
    lpt([7, 6, 5, 4, 4], 2, improve=False)    # Graham's LPT alone: [[0, 3, 4], [1, 2]], makespan 15.0

Every :class:`Plan` carries a valid lower bound on the optimum and the proven worst-case ratio of the
method used, so ``certified_ratio = makespan / lower_bound`` bounds this instance's gap.

**Lower bound** (:func:`lower_bound`). With loads sorted ascending (l_(1) <= ...) and lengths sorted
descending (p_1 >= ...), OPT is at least: max l; sum(p + l) / m; and for the k <= m longest jobs
min(l_(k) + p_k, l_(1) + p_(k-1) + p_k), since they run either on k distinct slots (the one of those
with the largest load starts at >= l_(k) a job >= p_k) or two of them share a slot. For n > m two of
the m + 1 longest share a slot: OPT >= l_(1) + p_m + p_(m+1). Without loads: max(p_1, p_m + p_(m+1),
sum p / m).

**lpt** (:func:`lpt`): Graham's longest-processing-time list schedule (longest job to the least loaded
slot, a heap: O(n log n)), then a bounded local search. Without loads LPT is within 4/3 - 1/(3m) of
OPT (Graham 1969). With loads it is within 3/2 - 1/(2m) (Lee 1991). Proof: let job j end last; it
went to the least loaded slot, which had load <= (sum(p + l) - p_j) / m, so the makespan is <= OPT +
(1 - 1/m) p_j, enough if p_j <= OPT / 2. Otherwise every job placed up to j exceeds OPT / 2, so OPT
puts them on j distinct slots of load <= OPT - p_j; LPT has put jobs on at most j - 1 slots, so one
of those j slots was free of jobs and j started at <= OPT - p_j. (A slot with no job ends at its load
<= OPT.) The local search moves a job off the busiest slot, or swaps a pair, only when that strictly
lowers the larger of the two loads, within ``IMPROVE_MAX_PASSES`` moves and ``IMPROVE_MAX_WORK`` jobs
examined (~10 ms for 4,096 jobs): it never raises the makespan, so the bounds above still hold.

**fptas** (:func:`fptas`), (1 + eps)-approximate, a rounded dynamic program for few slots:

1. UB = makespan of lpt, LB = the lower bound. If UB <= (1 + eps) LB, return lpt's plan.
2. Jobs longer than eps LB are *large*. q = the most large jobs one slot can hold below UB. Unit
   u = eps LB / (q + 1) (u = 1 if that is < 1 and all data are integers: then nothing is rounded).
   A job's key is ceil(p / u), a slot's initial key ceil(l / u).
3. DP over the large jobs, longest first. A state is the sorted vector of slot keys (sorting removes
   the slots' symmetry); each keeps one representative partial schedule, the one with the smallest
   real makespan, and a back-pointer. A child with a real load >= UB is dropped.
4. The best final representative gets the other (small) jobs by list scheduling, longest first, then
   the local search; the better of this plan and lpt's is returned.

Why 1 + eps: a slot with large jobs J has real load r <= u * key < r + u (``|J|`` + 1). Every key vector
that some schedule of the first k large jobs reaches is kept (extend the parent vector's representative
at the same coordinate), so if OPT < UB, OPT's schedule of the large jobs (<= q per slot) has a
representative of real makespan <= OPT + u (q + 1) = OPT + eps LB <= (1 + eps) OPT -- unless an
ancestor was dropped, which had a real load <= u * key <= (1 + eps) OPT and >= UB: then lpt's plan is
good enough. Small jobs keep the bound: the busiest slot either got none, or its last one (<= eps LB)
started on the least loaded slot, at <= sum(p + l) / m <= OPT.

Cost: list scheduling has UB <= 2 LB, so q + 1 <= 2 / eps + 1 and keys stay below C = UB / u + q + 1
= O(1 / eps^2). The states of one level share their key sum R, so a level holds at most (sorted
m-vectors in [0, C] summing to R, a Gaussian-binomial coefficient; <= comb(C + m - 1, m - 1)) states,
and at most prod_d comb(c_d + m - 1, m - 1) when c_d of its jobs have key d. There are fewer than
m / eps large jobs, so the DP makes O(m^2 / eps * C^(m-1)) transitions (state x slot), plus O(n log n)
for the rest: for a fixed slot count m, polynomial in n and in 1 / eps, a fully polynomial-time
approximation scheme (FPTAS, as the paper calls its planner), and exponential in m. :func:`estimate_fptas_work`
sums these bounds before any DP runs (an upper bound, usually far above the real count, which UB-pruning keeps small).

**Budgets.** :func:`fptas` counts its transitions and raises :class:`PlanTooLarge` past ``max_work``
(1-2 us each here). :func:`plan` never raises it: 'fptas' falls back to lpt past ``FPTAS_MAX_WORK``,
'auto' tries the fptas only if the estimate is <= ``AUTO_TRY_FACTOR * AUTO_MAX_WORK`` and with a cap of
``AUTO_MAX_WORK``, else returns lpt. ``Plan.method`` names the procedure that ran: an lpt plan that
the fptas certified in step 1 (as with thousands of jobs) is reported as 'fptas', guarantee 1 + eps.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from infgrpo.registry import check_choice, choices

Planner = Literal["auto", "lpt", "fptas"]
"""``SamplerConfig.planner``, the ``method`` of :func:`plan`."""
IMPROVE_MAX_PASSES = 64
"""Most moves/swaps the local search after LPT makes."""
IMPROVE_MAX_WORK = 16_384
"""Most jobs the local search examines in all (one bisect each; ~10 ms)."""
AUTO_MAX_WORK = 200_000
"""Most DP transitions ``plan(method="auto")`` lets the fptas make (~0.3 s) before it takes lpt."""
AUTO_TRY_FACTOR = 100
"""``plan(method="auto")`` tries the fptas only if :func:`estimate_fptas_work` <= this * AUTO_MAX_WORK."""
FPTAS_MAX_WORK = 1_000_000
"""Default cap on the DP transitions of :func:`fptas` (and of ``plan(method="fptas")``)."""
GAUSS_MAX_OPS = 200_000
"""Largest m * (final key sum) for which the estimate counts states per key sum exactly (<= ~25 ms)."""


class PlanTooLarge(RuntimeError):
    """The fptas DP passed its work budget (too many slots for this epsilon)."""


@dataclass
class Plan:
    """An assignment of jobs to slots, with its quality certificate."""

    queues: list[list[int]]
    """Per slot, job indices in the order to run them (longest first, ties by index)."""
    makespan: float
    """Max over slots of initial load + the lengths of its jobs."""
    lower_bound: float
    """A lower bound on the optimal makespan (see :func:`lower_bound`)."""
    guarantee: float
    """Proven worst-case makespan / optimum of ``method``: 1 + eps, 4/3 - 1/(3m) or 3/2 - 1/(2m)."""
    method: str
    """The procedure that produced the queues, whose guarantee applies: 'fptas' or 'lpt'."""

    @property
    def certified_ratio(self) -> float:
        """makespan / lower_bound: this instance's proven gap to the optimum (1.0 when both are 0)."""
        return self.makespan / self.lower_bound if self.lower_bound > 0 else 1.0


def makespan(queues: Sequence[Sequence[int]], lengths: Sequence[float], loads: Sequence[float] | None = None) -> float:
    """Max over slots of ``loads[i]`` + the lengths of the jobs in ``queues[i]``."""
    init = loads if loads is not None else [0.0] * len(queues)
    return float(max((init[i] + sum(lengths[j] for j in q) for i, q in enumerate(queues)), default=0.0))


def lower_bound(lengths: Sequence[float], num_slots: int, loads: Sequence[float] | None = None) -> float:
    """A lower bound on the optimal makespan (proved in the module docstring)."""
    return _lower_bound(*_check(lengths, num_slots, loads))


def lpt(lengths: Sequence[float], num_slots: int, loads: Sequence[float] | None = None, improve: bool = True) -> Plan:
    """Longest job first to the least loaded slot, then (``improve``) a bounded local search."""
    return _lpt(*_check(lengths, num_slots, loads), improve)


def fptas(
    lengths: Sequence[float],
    num_slots: int,
    epsilon: float,
    loads: Sequence[float] | None = None,
    *,
    max_work: int = FPTAS_MAX_WORK,
) -> Plan:
    """A plan within 1 + ``epsilon`` of the optimum; raises :class:`PlanTooLarge` past ``max_work``."""
    _check_epsilon(epsilon)
    p, m, init = _check(lengths, num_slots, loads)
    return _fptas(p, m, init, epsilon, _lpt(p, m, init), max_work)


def plan(
    lengths: Sequence[float],
    num_slots: int,
    method: Planner = "auto",
    epsilon: float = 0.1,
    loads: Sequence[float] | None = None,
) -> Plan:
    """Plan by ``method``: 'lpt', 'fptas' or 'auto' (the fptas where it is tractable, else lpt).

    Never raises :class:`PlanTooLarge`; see "Budgets" in the module docstring.
    """
    check_choice("method", method, choices(Planner))
    _check_epsilon(epsilon)
    p, m, init = _check(lengths, num_slots, loads)
    base = _lpt(p, m, init)
    if method == "lpt":
        return base
    budget = FPTAS_MAX_WORK
    if method == "auto":
        cap = AUTO_TRY_FACTOR * AUTO_MAX_WORK
        if _work_bound(_dp_setup(p, m, init, epsilon, base), m, cap) > cap:
            return base
        budget = AUTO_MAX_WORK
    try:
        return _fptas(p, m, init, epsilon, base, budget)
    except PlanTooLarge:
        return base


def estimate_fptas_work(
    lengths: Sequence[float], num_slots: int, epsilon: float, loads: Sequence[float] | None = None
) -> float:
    """Upper bound on the DP transitions :func:`fptas` makes here (0 when lpt is certified, no DP)."""
    _check_epsilon(epsilon)
    p, m, init = _check(lengths, num_slots, loads)
    return _work_bound(_dp_setup(p, m, init, epsilon, _lpt(p, m, init)), m, math.inf)


# --- lpt and its local search -------------------------------------------------------------------


def _lpt(p: list[float], m: int, init: list[float], improve: bool = True) -> Plan:
    heap = [(init[i], i) for i in range(m)]  # (load, slot): ties go to the lower slot index
    heapq.heapify(heap)
    queues: list[list[int]] = [[] for _ in range(m)]
    for j in sorted(range(len(p)), key=lambda j: (-p[j], j)):
        load, i = heap[0]
        queues[i].append(j)
        heapq.heapreplace(heap, (load + p[j], i))
    lb = _lower_bound(p, m, init)
    if improve and max(load for load, _ in heap) > lb:  # at the lower bound nothing can improve
        queues = _improve(queues, p, init)
    guarantee = 4 / 3 - 1 / (3 * m) if not any(init) else 3 / 2 - 1 / (2 * m)
    return Plan(queues, makespan(queues, p, init), lb, guarantee, "lpt")


def _improve(queues: list[list[int]], p: list[float], init: list[float]) -> list[list[int]]:
    """Moves/swaps off the busiest slot that strictly lower the larger of the two loads."""
    m = len(queues)
    jobs = [sorted((p[j], j) for j in q) for q in queues]  # per slot, ascending (length, index)
    loads = [init[i] + sum(p[j] for j in q) for i, q in enumerate(queues)]
    work = 0
    for _ in range(IMPROVE_MAX_PASSES):
        a = max(range(m), key=lambda i: (loads[i], -i))
        move = None
        for b in sorted(range(m), key=lambda i: (loads[i], i)):  # the largest gap first
            gap = loads[a] - loads[b]
            work += len(jobs[a])
            if gap <= 0 or work > IMPROVE_MAX_WORK:
                break
            move = _best_exchange(jobs[a], jobs[b], gap)
            if move is not None:
                break
        if move is None:
            break
        x, y = move  # x goes from a to b; y (if any) from b to a
        jobs[a].remove(x)
        insort(jobs[b], x)
        delta = x[0]
        if y is not None:
            jobs[b].remove(y)
            insort(jobs[a], y)
            delta -= y[0]
        loads[a] -= delta
        loads[b] += delta
    return [[j for _, j in sorted(js, key=lambda x: (-x[0], x[1]))] for js in jobs]


def _best_exchange(ja: list, jb: list, gap: float) -> tuple | None:
    """The move (x, None) or swap (x, y) that shifts d in (0, gap) from a to b, d closest to gap / 2."""
    best, best_err = None, gap / 2  # |d - gap / 2| < gap / 2  <=>  0 < d < gap
    lens_b = [y[0] for y in jb]
    for x in ja:
        if abs(x[0] - gap / 2) < best_err:
            best, best_err = (x, None), abs(x[0] - gap / 2)
        t = bisect_left(lens_b, x[0] - gap / 2)
        for y in jb[max(t - 1, 0) : t + 1]:
            if abs(x[0] - y[0] - gap / 2) < best_err:
                best, best_err = (x, y), abs(x[0] - y[0] - gap / 2)
    return best


# --- the fptas -----------------------------------------------------------------------------------


@dataclass
class _Setup:
    """Step 2's output: large and small jobs (longest first), their keys, and the key range."""

    large: list[int]
    small: list[int]
    keys: dict[int, int]
    """Large job -> ceil(length / unit)."""
    init_keys: list[int]
    ub: float
    q: int
    """Most large jobs one slot holds below UB: the rounding error of a slot is < unit * (q + 1)."""
    unit: float
    cmax: int
    """No slot key of a kept state exceeds it."""


def _dp_setup(p: list[float], m: int, init: list[float], eps: float, base: Plan) -> _Setup | None:
    """Steps 1-2 of the module docstring; None when lpt is already within 1 + eps (no DP)."""
    lb, ub = base.lower_bound, base.makespan
    if ub <= (1 + eps) * lb:
        return None
    order = sorted(range(len(p)), key=lambda j: (-p[j], j))
    large = [j for j in order if p[j] > eps * lb]
    small = [j for j in order if p[j] <= eps * lb]
    q, room = 0, ub - min(init)
    for j in reversed(large):  # shortest first: how many large jobs fit below UB on one slot
        if p[j] >= room:
            break
        room -= p[j]
        q += 1
    u = eps * lb / (q + 1)
    if u < 1 and all(x.is_integer() for x in (*p, *init)):
        u = 1.0
    keys = {j: math.ceil(p[j] / u) for j in large}
    return _Setup(large, small, keys, [math.ceil(x / u) for x in init], ub, q, u, int(ub / u) + q + 1)


def _work_bound(setup: _Setup | None, m: int, stop: float) -> float:
    """Sum over DP levels of m * (a bound on the level's states); stops once past ``stop``."""
    if setup is None:
        return 0.0
    sums = [sum(setup.init_keys)]  # every state of level k has key sum sums[k]
    for j in setup.large:
        sums.append(sums[-1] + setup.keys[j])
    if m * sums[-1] <= GAUSS_MAX_OPS:
        by_sum = _partitions(sums[-1], m, setup.cmax)
        by_range = [_as_float(by_sum[s]) for s in sums]
    else:  # a sorted vector with a known sum is fixed by its m - 1 smallest entries
        by_range = [_as_float(math.comb(setup.cmax + m - 1, m - 1)) if m < 1000 else math.inf] * len(sums)
    by_counts, counts, total = 1.0, {}, 0.0
    for k, j in enumerate(setup.large):
        total += m * min(by_range[k], by_counts)
        if total > stop:
            break
        c = counts.get(setup.keys[j], 0)
        counts[setup.keys[j]] = c + 1
        by_counts *= (c + m) / (c + 1)  # comb(c + m, m - 1) / comb(c + m - 1, m - 1)
    return total


def _partitions(total: int, parts: int, cap: int) -> list[int]:
    """a[r] = how many sorted vectors of ``parts`` integers in [0, cap] sum to r, for r <= total.

    The coefficients of the Gaussian binomial prod_{i=1..parts} (1 - q^(cap + i)) / (1 - q^i),
    one factor at a time: O(parts * total).
    """
    a = [1] + [0] * total
    for i in range(1, parts + 1):
        for r in range(i, total + 1):  # divide by (1 - q^i)
            a[r] += a[r - i]
        for r in range(total, cap + i - 1, -1):  # multiply by (1 - q^(cap + i))
            a[r] -= a[r - cap - i]
    return a


def _fptas(p: list[float], m: int, init: list[float], eps: float, base: Plan, max_work: int) -> Plan:
    certified = replace(base, guarantee=1 + eps, method="fptas")
    setup = _dp_setup(p, m, init, eps, base)
    if setup is None:
        return certified
    queues = _dp(setup, p, m, init, max_work)
    if queues is None:
        return certified
    # 4) the small jobs, longest first, onto the least loaded slot; then the local search
    heap = [(init[i] + sum(p[j] for j in q), i) for i, q in enumerate(queues)]
    heapq.heapify(heap)
    for j in setup.small:
        load, i = heap[0]
        queues[i].append(j)
        heapq.heapreplace(heap, (load + p[j], i))
    queues = _improve(queues, p, init)
    span = makespan(queues, p, init)
    return Plan(queues, span, base.lower_bound, 1 + eps, "fptas") if span < base.makespan else certified


def _dp(setup: _Setup, p: list[float], m: int, init: list[float], max_work: int) -> list[list[int]] | None:
    """Step 3: the DP over sorted key vectors. Queues of the large jobs; None if every child hit UB."""
    start = sorted(zip(setup.init_keys, init, strict=True))  # slots sorted by (key, real load)
    # sorted keys -> (real makespan, real loads aligned with the keys)
    frontier = {tuple(k for k, _ in start): (max(init), tuple(r for _, r in start))}
    history: list[dict[tuple[int, ...], tuple[tuple[int, ...], int]]] = []  # child -> (parent, position)
    work, ub = 0, setup.ub
    for j in setup.large:
        pj, kj = p[j], setup.keys[j]
        work += m * len(frontier)
        if work > max_work:
            raise PlanTooLarge(f"the fptas DP passed max_work={max_work} transitions ({len(frontier)} states)")
        nxt: dict[tuple[int, ...], tuple[float, tuple[float, ...]]] = {}
        back: dict[tuple[int, ...], tuple[tuple[int, ...], int]] = {}
        for keys, (top, reals) in frontier.items():
            for pos in range(m):
                k = keys[pos]
                if pos and k == keys[pos - 1]:  # same key as the slot before, no smaller load: same child
                    continue
                nr, nk = reals[pos] + pj, k + kj
                if nr >= ub:
                    continue
                ins = bisect_right(keys, nk, pos + 1)
                while ins > pos + 1 and keys[ins - 1] == nk and reals[ins - 1] > nr:
                    ins -= 1  # equal keys stay ordered by real load
                child = keys[:pos] + keys[pos + 1 : ins] + (nk,) + keys[ins:]
                ctop = top if top > nr else nr
                old = nxt.get(child)
                if old is None or ctop < old[0]:
                    nxt[child] = (ctop, reals[:pos] + reals[pos + 1 : ins] + (nr,) + reals[ins:])
                    back[child] = (keys, pos)
        history.append(back)
        frontier = nxt
        if not frontier:
            return None
    # 5) follow the back-pointers from the best final state, then replay the positions on real slots
    key = min(frontier, key=lambda k: (frontier[k][0], k))
    positions = []
    for back in reversed(history):
        key, pos = back[key]
        positions.append(pos)
    # the DP's slot order, with slot ids attached
    slots = sorted((k, r, i) for i, (k, r) in enumerate(zip(setup.init_keys, init, strict=True)))
    queues: list[list[int]] = [[] for _ in range(m)]
    for j, pos in zip(setup.large, reversed(positions), strict=True):
        k, r, i = slots.pop(pos)
        insort(slots, (k + setup.keys[j], r + p[j], i))
        queues[i].append(j)
    return queues


# --- bounds and validation ----------------------------------------------------------------------


def _lower_bound(p: list[float], m: int, init: list[float]) -> float:
    lo = sorted(init)
    top = heapq.nlargest(min(len(p), m + 1), p)  # descending
    bound = max(lo[-1], (sum(p) + sum(init)) / m)
    for k in range(1, min(len(p), m) + 1):
        distinct = lo[k - 1] + top[k - 1]
        bound = max(bound, distinct if k == 1 else min(distinct, lo[0] + top[k - 2] + top[k - 1]))
    if len(p) > m:
        bound = max(bound, lo[0] + top[m - 1] + top[m])
    return float(bound)


def _as_float(x: int) -> float:
    return float(x) if x < 1e300 else math.inf


def _check(lengths: Sequence[float], num_slots: int, loads: Sequence[float] | None) -> tuple:
    """(lengths, num_slots, loads) validated, as float lists; a ValueError names the bad field."""
    if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
        raise ValueError(f"num_slots={num_slots!r} must be an integer >= 1")
    p = _floats("lengths", lengths)
    if loads is None:
        return p, num_slots, [0.0] * num_slots
    if len(loads) != num_slots:
        raise ValueError(f"loads has {len(loads)} entries; it needs one per slot (num_slots={num_slots})")
    return p, num_slots, _floats("loads", loads)


def _floats(name: str, values: Sequence[float]) -> list[float]:
    out = []
    for i, x in enumerate(values):
        try:
            f = float(x)
        except (TypeError, ValueError, OverflowError):
            f = math.nan
        if not (math.isfinite(f) and f >= 0):
            raise ValueError(f"{name}[{i}]={x!r} must be a finite number >= 0")
        out.append(f)
    return out


def _check_epsilon(epsilon: float) -> None:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 < epsilon < math.inf:
        raise ValueError(f"epsilon={epsilon!r} must be a finite number > 0")
