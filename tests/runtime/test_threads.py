"""The CPU thread policy: the pure decision, the load measurement, and torch actually set."""

import os
import time

import pytest
import torch

from infgrpo.runtime.threads import (
    WORK_PER_THREAD,
    CpuSample,
    ThreadGovernor,
    check_threads,
    choose_threads,
    others_busy_cores,
    read_cpu_sample,
    usable_cores,
)


def test_fixed_setting_is_returned_as_is():
    assert choose_threads(3, cores=2, others_busy=5.0, work=1.0) == 3


def test_small_work_uses_one_thread_on_a_quiet_machine():
    tiny_decode = 600_000 * 64  # the tiny default: 0.6M parameters x 64 sequences
    assert choose_threads("auto", cores=16, others_busy=0.0, work=tiny_decode) == 1


def test_large_work_uses_every_free_core():
    assert choose_threads("auto", cores=16, others_busy=0.0, work=1e12) == 16
    assert choose_threads("auto", cores=2, others_busy=0.0, work=5 * WORK_PER_THREAD) == 2


def test_a_busy_core_is_left_to_the_other_process():
    assert choose_threads("auto", cores=2, others_busy=1.0, work=1e12) == 1
    assert choose_threads("auto", cores=8, others_busy=2.6, work=1e12) == 5


def test_background_noise_does_not_take_a_core():
    assert choose_threads("auto", cores=2, others_busy=0.2, work=1e12) == 2


def test_never_below_one_thread():
    assert choose_threads("auto", cores=2, others_busy=7.0, work=1e12) == 1


def test_others_busy_subtracts_our_own_cpu_time():
    before = CpuSample(busy_s=100.0, own_s=10.0, wall_s=0.0)
    after = CpuSample(busy_s=104.0, own_s=12.0, wall_s=2.0)  # 4 busy core-seconds, 2 of them ours
    assert others_busy_cores(before, after) == pytest.approx(1.0)
    assert others_busy_cores(after, after) == 0.0


@pytest.mark.parametrize("bad", [0, -1, "two", 1.5, True, None])
def test_check_threads_names_the_field_and_what_is_valid(bad):
    with pytest.raises(ValueError, match=r"model\.threads=.*'auto' or an integer >= 1"):
        check_threads(bad, "model.threads")


def test_check_threads_accepts_auto_and_integers():
    assert check_threads("auto") == "auto"
    assert check_threads("AUTO") == "auto"
    assert check_threads(4) == 4
    assert check_threads("4") == 4


def test_usable_cores_respects_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert usable_cores() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert 1 <= usable_cores() <= (os.cpu_count() or 1)


@pytest.mark.skipif(read_cpu_sample() is None, reason="needs /proc/stat (Linux)")
def test_cpu_samples_count_our_own_work_in_seconds_on_both_sides():
    before = read_cpu_sample()
    deadline = time.monotonic() + 10
    while sum(os.times()[:2]) - before.own_s < 0.2 and time.monotonic() < deadline:  # keep one core busy
        pass
    after = read_cpu_sample()
    own = after.own_s - before.own_s
    assert own >= 0.15
    # the machine-wide busy time (clock ticks) includes ours (seconds): same unit, so others stay >= 0
    assert after.busy_s - before.busy_s >= own - 0.05
    assert 0.0 <= others_busy_cores(before, after) <= (os.cpu_count() or 1) + 0.1


def test_governor_sets_torch_threads(tiny_model):
    old = torch.get_num_threads()
    try:
        assert ThreadGovernor(1).adapt(tiny_model, rows=8) == 1
        assert torch.get_num_threads() == 1
        auto = ThreadGovernor("auto")
        n = auto.adapt(tiny_model, rows=8)  # 0.6M parameters x 8 rows: one thread is enough
        assert n == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(old)
