"""A CUDA-graph capture that fails takes the right path: out of memory reaches the slot-halving retry, the
current stream and the allocator's pools are as before, and a capture that failed otherwise is not tried
again for the same model.

CPUs have no streams or graphs, so :class:`FakeDevice` stands in for the CUDA calls of
:class:`~infgrpo.sampler.engine.graph_capture.GraphRuntime` with their semantics (a stream context restores
the previous stream, a capture needs a side stream, a capture whose work failed cannot end cleanly and
leaves its pool routed, like ``CUDAGraph.capture_end``), and failures are injected where CUDA raises
them, as the out-of-memory tests do: a forward pre-hook on the real model, or the fake's own calls.
The decode step, its capture and failure handling, the pool keeper and the sampler all run for real.
The same paths on a real device: ``tests/gpu/test_decode_step_cuda.py``.
"""

import contextlib

import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.engine.decode_step import DecodeStep, StepSettings
from infgrpo.sampler.engine.graph_capture import MAX_REMEMBERED, CaptureFailures, GraphRuntime, capture_graph
from infgrpo.sampler.engine.slot_pool import SlotPool
from infgrpo.settings import InfgrpoWarning
from tests.helpers import random_model

NOT_PERMITTED = "operation not permitted when stream is capturing"


class FakeStream:
    def __init__(self, name):
        self.name, self.waited_on = name, []

    def wait_stream(self, other):
        self.waited_on.append(other)


class FakeGraph:
    def __init__(self, device):
        self.device, self.ended, self.replays = device, False, 0

    def capture_begin(self, pool=None):
        d = self.device
        if d.current is d.default:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream.")
        d.routed.add(pool)  # the allocator routes the capture stream's allocations to the pool first
        if d.fail == "begin":
            raise d.error
        d.begins += 1
        d.capturing, d.invalid = True, False

    def capture_end(self):
        d = self.device
        d.capturing = False  # the stream capture ends, valid or not
        if d.invalid or d.fail == "end":
            raise d.error if d.fail == "end" else RuntimeError("operation failed due to a previous error in capture")
        d.routed.clear()
        self.ended = True

    def pool(self):
        if not self.ended:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")

    def replay(self):
        self.replays += 1
        self.device.replay()  # a replay reruns what was captured


class FakeDevice(GraphRuntime):
    """A pretend CUDA device: streams, graphs and allocator pools, failing at ``fail`` with ``error``.

    ``fail``: 'begin' or 'end' (the graph's own calls), or 'warm-up' / 'capture' (the model's forward
    raises :attr:`error` while warming up on the side stream / while capturing; see :func:`failing_forward`).
    """

    def __init__(self, fail=None, error=None):
        self.default = FakeStream("default")
        self.current = self.default
        self.fail, self.error = fail, error if error is not None else RuntimeError(NOT_PERMITTED)
        self.capturing = self.invalid = False
        self.routed, self.begins, self.syncs = set(), 0, 0
        self.replay = lambda: None

    def side_stream(self):
        return FakeStream("side")

    def current_stream(self):
        return self.current

    @contextlib.contextmanager
    def use_stream(self, stream):
        before, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = before

    def new_graph(self):
        return FakeGraph(self)

    def new_pool(self):
        return ("pool", self.begins)

    def synchronize(self):
        self.syncs += 1

    def end_pool(self, graph, pool):
        self.routed.discard(pool)


def failing_forward(model, device, rows_over=0):
    """A pre-hook raising ``device.error`` in the phase ``device.fail`` names, on forwards over ``rows_over`` rows."""

    def hook(module, args, kwargs):
        rows = kwargs["input_ids"].shape[0]
        warming = device.current is not device.default and not device.capturing
        phase = "capture" if device.capturing else "warm-up" if warming else None
        if phase is not None and phase == device.fail and rows > rows_over:
            device.invalid = device.capturing  # CUDA invalidates a capture whose work fails
            raise device.error

    return model.register_forward_pre_hook(hook, with_kwargs=True)


def step_on(device, graphs="auto", seed=0):
    model = random_model("qwen3", torch.float32, seed=seed)
    pool = SlotPool(model.config, 4, 128, torch.float32, torch.device("cpu"))
    step = DecodeStep(model, pool, StepSettings(1.0, 0, 1.0, 0, graphs, width="pool"), runtime=device)
    step.start(0, token=5, position=3, key=(1, 2), t=1)
    step.start(2, token=7, position=9, key=(3, 4), t=2)
    if device is not None:
        device.replay = step.forward
    return model, step


def eager_reference(seed=0):
    _, step = step_on(None, "off", seed)
    return step().copy()


def assert_left_clean(device):
    assert device.current is device.default  # the stream the capture started on
    assert not device.capturing and device.routed == set()  # capture ended, its pool no longer routed
    assert device.syncs >= 1 and device.default.waited_on  # the side stream's work ordered before what follows


@pytest.mark.parametrize("phase", ["warm-up", "begin", "capture", "end"])
@pytest.mark.parametrize("graphs", ["auto", "on"])
def test_out_of_memory_while_capturing_stays_an_out_of_memory_error(phase, graphs):
    device = FakeDevice(phase, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    model, step = step_on(device, graphs)
    failing_forward(model, device)
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 2.00 GiB"):
        step()
    assert_left_clean(device)
    assert step.graph is None and step.fallback is None and step.failures.reasons == {}  # not remembered


def test_cuda_and_cublas_words_for_out_of_memory_become_an_out_of_memory_error():
    device = FakeDevice("capture", RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    model, step = step_on(device)
    failing_forward(model, device)
    with pytest.raises(torch.OutOfMemoryError, match="capturing the decode step: RuntimeError: CUDA error: CUBLAS"):
        step()
    assert_left_clean(device)


@pytest.mark.parametrize("phase", ["warm-up", "begin", "capture", "end"])
def test_another_failure_runs_eagerly_with_one_warning_and_is_not_tried_again(phase):
    device = FakeDevice(phase)
    model, step = step_on(device)
    failing_forward(model, device)
    warning = f"without CUDA graphs: capturing it failed \\(RuntimeError: {NOT_PERMITTED}\\)"
    with pytest.warns(InfgrpoWarning, match=warning):
        out = step().copy()
    assert_left_clean(device)
    assert step.graph is None and step.fallback == f"RuntimeError: {NOT_PERMITTED}"
    assert list(step.failures.reasons.values()) == [step.fallback]
    assert (out == eager_reference()).all()  # the eager step ran: same tokens and log-probs
    begins = device.begins
    step.prepare()  # the next rollout, same model: no new attempt
    step()
    assert device.begins == begins and step.graph is None


@pytest.mark.parametrize("phase", ["capture", "end"])
def test_cuda_graphs_on_raises_the_reason_and_leaves_the_stream_as_it_was(phase):
    device = FakeDevice(phase)
    model, step = step_on(device, "on")
    failing_forward(model, device)
    refusal = f"cuda_graphs='on' but the decode step could not be captured: .*{NOT_PERMITTED}"
    with pytest.raises(RuntimeError, match=refusal):
        step()
    assert_left_clean(device)
    with pytest.raises(RuntimeError, match="could not be captured"):  # remembered: no second attempt
        step()
    assert device.begins == 1


def test_a_capture_that_works_is_replayed_and_gives_the_eager_step():
    device = FakeDevice()
    _, step = step_on(device, "on")
    out = step().copy()
    assert step.captures == 1 and step.graph.replays == 1 and device.current is device.default
    assert device.routed == set() and step.fallback is None
    assert (out == eager_reference()).all()


def test_capture_graph_ends_a_capture_whose_work_raised_and_raises_that_error():
    device = FakeDevice()
    calls = []

    def forward():
        calls.append((device.current.name, device.capturing))
        if device.capturing:
            device.invalid = True
            raise ValueError("the captured work failed")

    with pytest.raises(ValueError, match="the captured work failed"):  # not capture_end's "previous error"
        capture_graph(forward, contextlib.nullcontext, device)
    assert calls == [("side", False), ("side", False), ("side", True)]  # two warm-ups, then the capture
    assert_left_clean(device)


# -- through the sampler: the retry that halves the slots, and the keeper's memory of failed captures --------
PROMPTS = [[5, 9, 11, 40], [7], [3, 30, 31]]
CFG = dict(max_new_tokens=10, temperature=1.0, decode_width="pool", stop_token_ids=[])


def sampler_on(model, device, **cfg):
    sampler = MicroGroupSampler(model, 2, SamplerConfig(**{**CFG, **cfg}))
    sampler.pools.runtime = device
    device.replay = lambda: sampler.pools.step.forward()
    return sampler


def assert_same(a, b):
    assert a.completion_ids == b.completion_ids
    for x, y in zip(a.logprobs, b.logprobs, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-6)


@pytest.mark.parametrize("phase", ["warm-up", "capture"])
@pytest.mark.parametrize("graphs", ["auto", "on"])
def test_out_of_memory_while_capturing_halves_the_slots_and_then_captures(phase, graphs):
    model = random_model("qwen3", torch.float32, seed=4)
    expected = MicroGroupSampler(model, 2, SamplerConfig(num_slots=4, cuda_graphs="off", **CFG)).sample(PROMPTS, 4, 1)
    device = FakeDevice(phase, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.50 GiB"))
    sampler = sampler_on(model, device, num_slots=8, cuda_graphs=graphs)
    handle = failing_forward(model, device, rows_over=4)  # 8 slots do not fit, 4 do
    try:
        with pytest.warns(InfgrpoWarning, match="out of device memory with 8 slots .*retrying with 4"):
            got = sampler.sample(PROMPTS, 4, seed=1)
    finally:
        handle.remove()
    st = got.stats
    assert (st["oom_retries"], st["num_slots"], st["graph_captures"], st["graph_fallback"]) == (1, 4, 1, "")
    assert_same(got, expected)
    assert device.current is device.default and device.routed == set()


def test_a_failed_capture_is_remembered_across_rebuilt_steps_until_the_model_changes():
    model = random_model("qwen3", torch.float32, seed=5)
    expected = MicroGroupSampler(model, 2, SamplerConfig(num_slots=4, cuda_graphs="off", **CFG)).sample(PROMPTS, 4, 2)
    device = FakeDevice("capture")
    sampler = sampler_on(model, device, num_slots=4, keep_pool=False)  # a new pool and step every rollout
    handle = failing_forward(model, device)
    try:
        with pytest.warns(InfgrpoWarning, match="capturing it failed") as seen:
            first = sampler.sample(PROMPTS, 4, seed=2)
        assert len([w for w in seen if "CUDA graphs" in str(w.message)]) == 1
        assert (first.stats["graph_captures"], first.stats["graph_fallback"]) == (0, f"RuntimeError: {NOT_PERMITTED}")
        assert_same(first, expected)
        with warnings_recorded() as later:
            again = sampler.sample(PROMPTS, 4, seed=2)
        assert sampler.pools.allocations == 2 and device.begins == 1  # rebuilt, and not tried again
        assert not [w for w in later if "CUDA graphs" in str(w.message)]
        assert again.stats["graph_fallback"] == first.stats["graph_fallback"]
        assert_same(again, expected)
    finally:
        handle.remove()
    weight = model.get_input_embeddings().weight
    weight.data = weight.data.clone()  # new storage: another fingerprint, so the capture is tried again
    moved = sampler.sample(PROMPTS, 4, seed=2)
    assert device.begins == 2 and moved.stats["graph_captures"] == 1 and moved.stats["graph_fallback"] == ""
    assert_same(moved, expected)


def test_the_keeper_remembers_a_bounded_number_of_failures():
    failures = CaptureFailures()
    for i in range(MAX_REMEMBERED + 3):
        failures.remember(i, f"reason {i}")
    assert list(failures.reasons) == list(range(3, MAX_REMEMBERED + 3))  # the oldest dropped first
    assert failures.reason(2) is None and failures.reason(MAX_REMEMBERED + 2) == f"reason {MAX_REMEMBERED + 2}"


@contextlib.contextmanager
def warnings_recorded():
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield seen
