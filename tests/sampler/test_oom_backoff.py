"""A rollout that runs out of device memory retries with half the slots and returns the same completions.

CPUs do not raise out-of-memory errors, so a forward pre-hook on the real model raises
``torch.OutOfMemoryError`` (what CUDA raises) whenever more than ``limit`` sequences decode at once:
the engine, the sampler and the model all run for real; only the allocator's refusal is injected.
"""

import re

import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.settings import InfgrpoWarning


def memory_limit(model, limit):
    """Makes ``model`` fail like a full GPU when a forward gets more than ``limit`` rows."""

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[0] > limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {ids.shape[0]} rows")

    return model.register_forward_pre_hook(hook, with_kwargs=True)


def test_rollout_halves_the_slots_until_it_fits_and_gives_the_same_completions(tiny_model, tokenizer, prompts):
    cfg = dict(max_new_tokens=12, temperature=1.0)
    expected = MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(num_slots=3, **cfg)).sample(prompts, 8, seed=5)
    sampler = MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(num_slots=16, **cfg))
    handle = memory_limit(tiny_model, 3)
    try:
        with pytest.warns(InfgrpoWarning, match=r"out of device memory with \d+ slots") as seen:
            got = sampler.sample(prompts, 8, seed=5)
        retries = [re.search(r"with (\d+) slots .*retrying with (\d+)", str(w.message)).groups() for w in seen]
        assert retries == [("16", "8"), ("8", "4"), ("4", "2")]
        assert got.stats["oom_retries"] == 3 and got.stats["num_slots"] == 2  # 16 -> 8 -> 4 -> 2
        assert got.completion_ids == expected.completion_ids
        for a, b in zip(got.logprobs, expected.logprobs, strict=True):
            assert torch.allclose(a, b, atol=1e-6)
        again = sampler.sample(prompts, 8, seed=6)  # starts at the count that worked
        assert again.stats["oom_retries"] == 0 and again.stats["num_slots"] == 2
    finally:
        handle.remove()


def test_evaluation_backs_off_too(tiny_model, tokenizer, prompts):
    sampler = MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(max_new_tokens=8, temperature=0.0))
    expected = sampler.generate_one(prompts, batch_size=1)
    handle = memory_limit(tiny_model, 1)
    try:
        with pytest.warns(InfgrpoWarning, match=r"Set data\.eval_batch_size to \d or less") as seen:
            got = sampler.generate_one(prompts, batch_size=4)
        assert [re.search(r"to (\d) or less", str(w.message)).group(1) for w in seen] == ["2", "1"]
    finally:
        handle.remove()
    assert got.completion_ids == expected.completion_ids and got.stats["oom_retries"] == 2


def test_when_one_slot_does_not_fit_the_error_says_what_to_lower(tiny_model, tokenizer, prompts):
    sampler = MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(num_slots=2, max_new_tokens=8))
    handle = memory_limit(tiny_model, 0)
    try:
        with pytest.warns(InfgrpoWarning), pytest.raises(torch.OutOfMemoryError) as err:
            sampler.sample(prompts, 4)
    finally:
        handle.remove()
    assert "even with one slot (model.sampler.num_slots)" in str(err.value)
    assert "max_new_tokens=8" in str(err.value) and "model.quantization.load_in_4bit" in str(err.value)
