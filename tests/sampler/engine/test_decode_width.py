"""decode_width 'busy': a step computes only the running sequences, packed at the front of the pool, and
decodes exactly what the whole-pool step decodes (the reference: decode_width 'pool')."""

import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.engine.decode_step import MIN_BUSY_WIDTH
from tests.helpers import random_model

PROMPTS = [[5, 9, 11, 40], [7], [3, 30, 31, 32, 33, 34, 35], [60, 61]]


def decode(model, width, num_slots, group_size, rows=None, **kw):
    """The rollout under ``decode_width=width``; ``rows`` collects the rows of every decode-step forward."""
    hook = None
    if rows is not None:

        def count(module, args, kwargs):
            ids = kwargs["input_ids"]
            if ids.shape[1] == 1:  # a decode step (prefills run the prompts' lengths)
                rows.append(ids.shape[0])

        hook = model.register_forward_pre_hook(count, with_kwargs=True)
    cfg = SamplerConfig(num_slots=num_slots, max_new_tokens=14, decode_width=width, **kw)
    try:
        return MicroGroupSampler(model, 2, cfg).sample(PROMPTS, group_size, seed=4)
    finally:
        if hook is not None:
            hook.remove()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("num_slots,group_size", [(3, 5), (8, 6), (16, 4), (32, 8)])
def test_busy_width_decodes_what_the_whole_pool_decodes(dtype, num_slots, group_size):
    model = random_model("qwen3", dtype, seed=5)
    want = decode(model, "pool", num_slots, group_size, top_k=50)
    got = decode(model, "busy", num_slots, group_size, top_k=50)
    assert got.completion_ids == want.completion_ids
    assert got.finish_reasons == want.finish_reasons
    assert len({len(c) for c in want.completion_ids}) > 2  # ragged: sequences end at many steps, and move
    for a, b in zip(got.logprobs, want.logprobs, strict=True):
        assert torch.allclose(torch.as_tensor(a).double(), torch.as_tensor(b).double(), atol=1e-6, rtol=0)
    assert got.stats["decode_steps"] == want.stats["decode_steps"]


def test_a_busy_width_step_computes_the_running_sequences_only():
    model = random_model("llama", torch.float32, seed=6)
    pool_rows, busy_rows = [], []
    want = decode(model, "pool", 16, 6, rows=pool_rows)
    got = decode(model, "busy", 16, 6, rows=busy_rows)
    steps = want.stats["decode_steps"]
    assert len(pool_rows) == len(busy_rows) == steps and set(pool_rows) == {16}
    assert all(MIN_BUSY_WIDTH <= r <= 16 for r in busy_rows)
    # the slots' busy share is the rows a step needs: the busy step computes those (and idle rows up to 8)
    needed = want.stats["slot_utilization"] * 16 * steps
    assert needed <= sum(busy_rows) <= needed + MIN_BUSY_WIDTH * steps
    assert sum(busy_rows) < 0.8 * sum(pool_rows)
    assert got.completion_ids == want.completion_ids


def test_busy_width_with_cuda_graphs_on_is_refused_by_name():
    with pytest.raises(ValueError, match="cuda_graphs='on' needs decode_width 'pool' or 'auto'"):
        SamplerConfig(cuda_graphs="on", decode_width="busy")
    with pytest.raises(ValueError, match="decode_width"):
        SamplerConfig(decode_width="wide")
