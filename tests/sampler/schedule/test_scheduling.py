"""Refill policies and the trace simulator: order of work only, and the simulator is the engine."""

import itertools
import random

import pytest
import torch

from infgrpo.sampler import SamplerConfig
from infgrpo.sampler.engine.engine import Engine
from infgrpo.sampler.engine.feed import FixedBatch
from infgrpo.sampler.schedule.schedule_metrics import lower_bound_steps
from infgrpo.sampler.schedule.simulate import naive_micro_group_steps, simulate
from tests.helpers import random_model

POLICIES = ["fifo", "sjf", "lpt", "planned"]
PROMPTS = [[5, 9, 11, 40], [7], [3, 30, 31, 32, 33, 34, 35], [60, 61]]


def run_engine(model, policy, preds, num_slots=3, group_size=5, max_new=12, seed=4, planner="auto"):
    cfg = SamplerConfig(num_slots=num_slots, max_new_tokens=max_new, temperature=1.0, refill=policy, planner=planner)
    engine = Engine(model, cfg, stop_ids=[2], pad_id=0)
    feed = FixedBatch(PROMPTS, group_size, seed, preds)
    stats = engine.run(feed)
    return feed.initial(), stats


@pytest.fixture(scope="module")
def model():
    return random_model("qwen3", torch.float64, seed=5).eval()


def test_every_policy_yields_the_same_completions_and_log_probs(model):
    """Schedule invariance: the refill policy reorders work, never changes a completion."""
    preds = [11.0, 2.0, 7.0, 4.0]  # differ per prompt, so the policies really order differently
    runs = {p: run_engine(model, p, preds) for p in POLICIES}
    ref_seqs, _ = runs["fifo"]
    orders = set()
    for policy, (seqs, stats) in runs.items():
        assert [s.token_ids for s in seqs] == [s.token_ids for s in ref_seqs], policy
        for a, b in zip(seqs, ref_seqs, strict=True):
            torch.testing.assert_close(a.logprobs, b.logprobs, rtol=0, atol=1e-12)
        orders.add(tuple((t[1], t[2]) for t in sorted(stats.timeline, key=lambda t: (t[3], t[0]))))
    assert len(orders) > 1  # the policies did run the work in different orders
    assert len({len(s) for s in ref_seqs}) > 1  # lengths vary, so order matters


@pytest.mark.parametrize("policy", POLICIES)
def test_simulator_makes_the_engines_decisions(model, policy):
    """Given the lengths the engine produced, the simulator reproduces its steps and timeline exactly."""
    preds = [3.0, 9.0, 1.0, 6.0]
    seqs, stats = run_engine(model, policy, preds, num_slots=3, group_size=5)
    lengths = [len(s) for s in seqs]
    sim = simulate(lengths, [preds[i // 5] for i in range(len(seqs))], 3, policy, group_size=5)
    assert sim.decode_steps == stats.decode_steps
    assert sim.timeline == stats.timeline
    assert sim.busy_slot_steps == stats.busy_slot_steps


def brute_force_makespan(durations, m):
    best = float("inf")
    for assign in itertools.product(range(m), repeat=len(durations)):
        loads = [0] * m
        for d, a in zip(durations, assign, strict=True):
            loads[a] += d
        best = min(best, max(loads))
    return best


def test_lpt_refill_with_exact_lengths_is_within_grahams_bound():
    rng = random.Random(0)
    for _ in range(60):
        m = rng.choice([2, 3])
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 7))]
        opt = brute_force_makespan(lengths, m)
        lpt = simulate(lengths, lengths, m, "lpt", first_token_free=False).decode_steps
        assert opt <= lpt <= (4 / 3 - 1 / (3 * m)) * opt + 1e-9


def test_planned_refill_with_exact_lengths_keeps_the_fptas_bound():
    rng = random.Random(1)
    for _ in range(60):
        m = rng.choice([2, 3])
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 7))]
        opt = brute_force_makespan(lengths, m)
        res = simulate(lengths, lengths, m, "planned", planner="fptas", epsilon=0.1, first_token_free=False)
        assert opt <= res.decode_steps <= 1.1 * opt + 1e-9
        assert res.replans == 0


def test_sjf_starts_the_shortest_and_lpt_the_longest():
    lengths = [5, 50, 20, 1, 35]
    sjf = simulate(lengths, lengths, 1, "sjf", first_token_free=False)
    lpt = simulate(lengths, lengths, 1, "lpt", first_token_free=False)
    assert [t[2] for t in sjf.timeline] == [3, 0, 2, 4, 1]
    assert [t[2] for t in lpt.timeline] == [1, 4, 2, 0, 3]


def test_without_predictions_every_policy_is_fifo():
    rng = random.Random(2)
    lengths = [rng.randint(1, 60) for _ in range(40)]
    steps = {p: simulate(lengths, [10.0] * 40, 4, p, group_size=8).decode_steps for p in POLICIES}
    assert len(set(steps.values())) == 1


def test_schedule_bounds_and_naive_micro_groups():
    lengths = [10, 1, 1, 1, 10, 1, 1, 1]  # one prompt, G=8, 4 slots
    # naive: rounds [10,1,1,1] and [10,1,1,1] cost 10 each; continuous refill: both long ones at once
    assert naive_micro_group_steps(lengths, 8, 4) == 20
    fifo = simulate(lengths, None, 4, "fifo", first_token_free=False)
    assert fifo.decode_steps == 11  # the second long one starts a step late
    lpt = simulate(lengths, lengths, 4, "lpt", first_token_free=False)
    assert lpt.decode_steps == 10 == lower_bound_steps(lengths, 4)
    assert lower_bound_steps([4, 4, 4], 2) == 6


def test_pool_larger_than_the_work_and_one_token_completions():
    res = simulate([1, 1, 3], [1, 1, 3], 8, "planned")  # engine accounting: 1-token ones take no slot
    assert res.num_slots == 3 and res.decode_steps == 2 and res.durations == [0, 0, 2]
    assert simulate([], None, 4).decode_steps == 0
