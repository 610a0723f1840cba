"""A CUDA-graph capture that fails on a real device: the stream and the allocator are left as they were,
out of memory reaches the slot-halving retry, and a failed capture is not tried again for the same model.

Failures are real CUDA ones: a host read or a device synchronization while capturing (not permitted),
and a 1 PiB allocation (a real out-of-memory error) while warming up or capturing. The same paths on
a CPU, with a fake device: ``tests/sampler/engine/test_graph_capture.py``. Run on a lent GPU:
``python -m pytest -m gpu tests/gpu``.
"""

import contextlib

import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.engine.graph_capture import GraphRuntime, capture_graph
from infgrpo.settings import InfgrpoWarning
from tests.helpers import random_model

pytestmark = pytest.mark.gpu
PROMPTS = [[5, 9, 11, 40], [7], [3, 30, 31, 32, 33, 34, 35]]
CFG = dict(max_new_tokens=24, temperature=1.0, top_k=40)
VIOLATIONS = {
    "host read": lambda: torch.ones(1, device="cuda").sum().item(),
    "device synchronize": torch.cuda.synchronize,
}


def cuda_model(seed):
    return random_model("qwen3", torch.float32, seed=seed, attn_implementation="sdpa").cuda()


def assert_same(a, b):
    assert a.completion_ids == b.completion_ids
    for x, y in zip(a.logprobs, b.logprobs, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-5)


def assert_device_as_before(stream):
    assert torch.cuda.current_stream() == stream
    assert not torch.cuda.is_current_stream_capturing()
    torch.cuda.empty_cache()  # fails an internal assert while the allocator believes a capture is under way
    torch.cuda.synchronize()


@pytest.mark.parametrize("violation", list(VIOLATIONS))
def test_a_failed_capture_leaves_the_stream_and_the_allocator_and_the_next_capture_works(violation):
    stream = torch.cuda.current_stream()
    x, y = torch.ones(8, device="cuda"), torch.zeros(8, device="cuda")

    def bad():
        y.copy_(x * 2)
        if torch.cuda.is_current_stream_capturing():
            VIOLATIONS[violation]()

    with pytest.raises(RuntimeError):
        capture_graph(bad, contextlib.nullcontext, GraphRuntime())
    assert_device_as_before(stream)
    graph = capture_graph(lambda: y.copy_(x * 3), contextlib.nullcontext, GraphRuntime())
    x.fill_(2.0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, torch.full((8,), 6.0, device="cuda")) and torch.cuda.current_stream() == stream


@pytest.mark.parametrize("violation", list(VIOLATIONS))
def test_a_rollout_whose_capture_fails_runs_eagerly_and_the_next_one_does_not_try_again(violation):
    model = cuda_model(seed=4)
    expected = MicroGroupSampler(model, 2, SamplerConfig(num_slots=4, cuda_graphs="off", **CFG)).sample(PROMPTS, 5, 3)
    attempts = []

    def hook(module, args, kwargs):
        if torch.cuda.is_current_stream_capturing():
            attempts.append(kwargs["input_ids"].shape[0])
            VIOLATIONS[violation]()

    stream = torch.cuda.current_stream()
    sampler = MicroGroupSampler(model, 2, SamplerConfig(num_slots=4, keep_pool=False, **CFG))
    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with pytest.warns(InfgrpoWarning, match="without CUDA graphs: capturing it failed"):
            first = sampler.sample(PROMPTS, 5, seed=3)  # keep_pool false: released (empty_cache) afterwards
        assert_device_as_before(stream)
        assert first.stats["graph_captures"] == 0 and first.stats["graph_fallback"]
        assert_same(first, expected)
        again = sampler.sample(PROMPTS, 5, seed=3)  # a new pool and step, the same model
        assert attempts == [4] and again.stats["graph_fallback"] == first.stats["graph_fallback"]
        assert_same(again, expected)
    finally:
        handle.remove()
    assert_device_as_before(stream)


@pytest.mark.parametrize("phase", ["warm-up", "capture"])
@pytest.mark.parametrize("graphs", ["auto", "on"])
def test_out_of_memory_while_capturing_halves_the_slots_then_captures(phase, graphs):
    model = cuda_model(seed=5)
    expected = MicroGroupSampler(model, 2, SamplerConfig(num_slots=2, cuda_graphs="off", **CFG)).sample(PROMPTS, 5, 3)

    def hook(module, args, kwargs):
        capturing = torch.cuda.is_current_stream_capturing()
        warming = not capturing and torch.cuda.current_stream() != torch.cuda.default_stream()
        if kwargs["input_ids"].shape[0] > 2 and (capturing if phase == "capture" else warming):
            torch.empty(2**50, dtype=torch.uint8, device="cuda")  # 1 PiB: the allocator refuses

    stream = torch.cuda.current_stream()
    sampler = MicroGroupSampler(model, 2, SamplerConfig(num_slots=4, cuda_graphs=graphs, **CFG))
    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with pytest.warns(InfgrpoWarning, match="out of device memory with 4 slots .*retrying with 2"):
            got = sampler.sample(PROMPTS, 5, seed=3)
    finally:
        handle.remove()
    st = got.stats
    assert (st["oom_retries"], st["num_slots"], st["graph_captures"], st["graph_fallback"]) == (1, 2, 1, "")
    assert_same(got, expected)
    assert_device_as_before(stream)
