"""What only a CUDA device can check of the decode step: graph replay against the eager step, recapture
when adapters toggle or parameters move, the pinned attention kernel, and one host copy each way a step.

Run on a lent GPU: ``python -m pytest -m gpu tests/gpu`` (skipped without CUDA, see tests/conftest.py).
Small float32 models, a few seconds in all.
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.engine.decode_step import DecodeStep, StepSettings
from infgrpo.sampler.engine.slot_pool import SlotPool
from tests.helpers import random_model

pytestmark = pytest.mark.gpu
PROMPTS = [[5, 9, 11, 40], [7], [3, 30, 31, 32, 33, 34, 35]]


def cuda_model(arch="qwen3", seed=0):
    return random_model(arch, torch.float32, seed=seed, attn_implementation="sdpa").cuda()


def rollout(model, graphs, temperature, **cfg):
    sc = SamplerConfig(num_slots=4, max_new_tokens=24, temperature=temperature, cuda_graphs=graphs, **cfg)
    return MicroGroupSampler(model, 2, sc).sample(PROMPTS, 5, seed=3)


def assert_same(a, b):
    assert a.completion_ids == b.completion_ids
    for x, y in zip(a.logprobs, b.logprobs, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_graph_replay_equals_the_eager_step_token_for_token(temperature):
    model = cuda_model()
    on, off = rollout(model, "on", temperature, top_k=40), rollout(model, "off", temperature, top_k=40)
    assert on.stats["graph_captures"] == 1 and off.stats["graph_captures"] == 0
    assert on.stats["decode_steps"] == off.stats["decode_steps"] > 0
    assert_same(on, off)


def test_the_graph_is_recaptured_after_an_adapter_toggle_and_a_parameter_move():
    from peft import LoraConfig, get_peft_model

    peft = get_peft_model(cuda_model(seed=1), LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    peft.eval()
    cfg = dict(num_slots=4, max_new_tokens=16)
    sampler = MicroGroupSampler(peft, 2, SamplerConfig(cuda_graphs="on", **cfg))
    eager = MicroGroupSampler(peft, 2, SamplerConfig(cuda_graphs="off", **cfg))
    first = sampler.sample(PROMPTS, 3, seed=1)
    assert sampler.sample(PROMPTS, 3, seed=1).stats["graph_captures"] == 1  # same model: replayed, not recaptured
    with peft.disable_adapter():  # a stale graph would still run the adapters
        off = sampler.sample(PROMPTS, 3, seed=1)
        assert_same(off, eager.sample(PROMPTS, 3, seed=1))
    assert off.stats["graph_captures"] == 2 and off.completion_ids != first.completion_ids
    back = sampler.sample(PROMPTS, 3, seed=1)  # adapters on again
    assert back.stats["graph_captures"] == 3
    assert_same(back, first)
    weight = peft.get_input_embeddings().weight
    weight.data = weight.data.clone()  # same values, new storage: a stale graph would read the old one
    moved = sampler.sample(PROMPTS, 3, seed=1)
    assert moved.stats["graph_captures"] == 4
    assert_same(moved, first)


class Transfers(TorchDispatchMode):
    """Counts the host <-> device copies and the scalar read-backs dispatched in the block."""

    def __init__(self):
        super().__init__()
        self.copies, self.reads = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name == "copy_" and args[0].device != args[1].device:
            self.copies += 1
        if name == "_to_copy" and "device" in kwargs and torch.device(kwargs["device"]) != args[0].device:
            self.copies += 1
        if name == "_local_scalar_dense":
            self.reads += 1
        return func(*args, **kwargs)


def pool_step(model, graphs, attention="efficient"):
    """A step over 4 slots of 128 positions: slots 0 and 2 run, 1 and 3 idle."""
    pool = SlotPool(model.config, 4, 128, torch.float32, torch.device("cuda"))
    step = DecodeStep(model, pool, StepSettings(1.0, 0, 1.0, 0, graphs, attention))
    step.start(0, token=5, position=3, key=(1, 2), t=1)
    step.start(2, token=7, position=9, key=(3, 4), t=2)
    return step


@pytest.mark.parametrize("graphs", ["on", "off"])
def test_a_step_makes_one_host_copy_each_way_and_no_scalar_read(graphs):
    step = pool_step(cuda_model(seed=2), graphs)
    step()  # 'on' captures here
    for _ in range(3):
        step.advance(0, 11)
        with Transfers() as seen:
            step()
        assert (seen.copies, seen.reads) == (2, 0)  # the state in, the (S, 2) tokens and log-probs out


@pytest.mark.parametrize(
    ("attention", "runs", "not_runs"), [("efficient", "efficient", "math"), ("math", "math", "efficient")]
)
def test_the_pinned_attention_kernel_runs_the_step(attention, runs, not_runs):
    from torch.profiler import ProfilerActivity, profile

    step = pool_step(cuda_model(seed=3), "off", attention)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    names = {e.name for e in prof.events()}
    kernels = {
        "efficient": "aten::_scaled_dot_product_efficient_attention",
        "math": "aten::_scaled_dot_product_attention_math",
    }
    assert kernels[runs] in names and kernels[not_runs] not in names
