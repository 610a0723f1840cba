"""The decoder ``hf_cb`` (transformers' continuous batching): its log-probs, its stats, the process state it leaves.

Greedy ``hf_cb`` against HF ``generate`` and its unfiltered log-probs against a training forward run with
the other decoders in ``test_sampler.py``.
"""

import math

import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.hf.baselines import BASELINES, generation_kwargs
from infgrpo.sampler.hf.hf_continuous import PAGE_SIZE
from infgrpo.sampler.hf.request import DecodeRequest
from infgrpo.sampler.model_support import kv_bytes_per_token
from tests.helpers import random_model

PROMPTS = [[5, 9, 11, 40], [7], [3, 30, 31, 32, 33, 34, 35]]


def filtered_logprobs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """log-softmax (n, V) of ``logits`` (n, V) / temperature over the top-k tokens, then the top-p nucleus (float64).

    The nucleus: the most likely tokens, in order, until their probability reaches ``top_p`` (a token is
    kept when the tokens above it hold less than ``top_p``).
    """
    x = logits.double() / temperature
    kth = x.topk(top_k, dim=-1).values[:, -1:]
    x = x.masked_fill(x < kth, -math.inf)
    probs, order = x.softmax(-1).sort(-1, descending=True)
    above = probs.cumsum(-1) - probs  # (n, V) probability of the tokens more likely than each
    drop = torch.zeros_like(x, dtype=torch.bool).scatter(-1, order, above >= top_p)
    return x.masked_fill(drop, -math.inf).log_softmax(-1)


def test_sampled_logprobs_are_taken_after_temperature_top_k_and_top_p():
    model = random_model("qwen3", torch.float64)
    cfg = SamplerConfig(num_slots=3, max_new_tokens=10, temperature=0.7, top_k=20, top_p=0.9, decoder="hf_cb")
    out = MicroGroupSampler(model, 2, cfg).sample(PROMPTS, group_size=4, seed=1)
    worst, unfiltered_gap = 0.0, 0.0
    for i, ids in enumerate(out.completion_ids):
        prompt = out.prompt_ids[out.prompt_index[i]]
        with torch.no_grad():  # one forward over prompt + completion; row t predicts completion token t
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]  # (len, V)
        tokens = torch.tensor(ids).unsqueeze(-1)
        want = filtered_logprobs(logits, 0.7, 20, 0.9).gather(-1, tokens).squeeze(-1)
        plain = torch.log_softmax(logits.double() / 0.7, -1).gather(-1, tokens).squeeze(-1)
        worst = max(worst, float((out.logprobs[i].double() - want).abs().max()))
        unfiltered_gap = max(unfiltered_gap, float((out.logprobs[i].double() - plain).abs().max()))
    assert worst < 1e-5  # transformers samples from float32 logits
    assert unfiltered_gap > 1e-2  # the filtering shows: these are not the other decoders' log-probs


def test_model_modes_rng_state_and_attention_are_as_they_were():
    model = random_model("llama", torch.float32)
    model.train()
    model.model.layers[1].eval()  # a mixed state: restoring with model.train() would not give it back
    modes = {name: m.training for name, m in model.named_modules()}
    torch.manual_seed(123)
    before = torch.get_rng_state()
    kw = generation_kwargs(8, 1.0, 0, 1.0, [2], 0)
    out = BASELINES.get("hf_cb")(model, DecodeRequest(PROMPTS, 3, 4, 0, 0, kw, kv_bytes_per_token(model)))
    assert len(out) == 9
    assert {name: m.training for name, m in model.named_modules()} == modes
    assert torch.equal(torch.get_rng_state(), before)  # generate_batch reseeds torch's generator; it is restored
    assert model.config._attn_implementation == "sdpa"
    assert getattr(model, "_cached_continuous_batching_manager", None) is None  # its paged cache is freed


def test_stats_order_and_repeatability_for_a_seed_but_not_across_schedules():
    model = random_model("qwen3", torch.float32)
    cfg = dict(max_new_tokens=12, temperature=1.0, decoder="hf_cb")
    sampler = MicroGroupSampler(model, 2, SamplerConfig(num_slots=3, **cfg))
    a, b = sampler.sample(PROMPTS, 4, seed=7), sampler.sample(PROMPTS, 4, seed=7)
    other_seed = sampler.sample(PROMPTS, 4, seed=8)
    other_slots = MicroGroupSampler(model, 2, SamplerConfig(num_slots=5, **cfg)).sample(PROMPTS, 4, seed=7)
    assert a.completion_ids == b.completion_ids
    assert other_seed.completion_ids != a.completion_ids
    assert other_slots.completion_ids != a.completion_ids  # documented: hf_cb is not schedule-invariant
    assert a.prompt_index == [0] * 4 + [1] * 4 + [2] * 4 and len(a.logprobs) == 12
    for ids, lp, reason in zip(a.completion_ids, a.logprobs, a.finish_reasons, strict=True):
        assert len(lp) == len(ids) <= 12 and (lp <= 0).all()
        assert reason == ("stop" if ids[-1] == 2 else "length")
    st, lengths = a.stats, a.lengths
    assert st["num_slots"] == 3 and st["generated_tokens"] == sum(lengths)
    assert max(max(lengths), math.ceil(sum(lengths) / 3)) <= st["decode_steps"]  # 3 sequences a forward at most
    # the paged cache: K/V blocks for 3 sequences of the longest prompt + 12 tokens (beside transformers' spare ones)
    assert st["cb_num_blocks"] == 3 * math.ceil((7 + 12) / PAGE_SIZE)
    assert st["kv_bytes_peak"] >= st["cb_num_blocks"] * PAGE_SIZE * kv_bytes_per_token(model)
    assert 0 < st["slot_utilization"] <= 1 and st["tokens_per_s"] > 0


def test_models_it_cannot_run_are_refused_with_the_reason():
    model = random_model("qwen3", torch.float32)
    model.config._attn_implementation = "flex_attention"
    kw = generation_kwargs(4, 1.0, 0, 1.0, [2], 0)
    with pytest.raises(ValueError, match="decoder='hf_cb' cannot run: attn_implementation='flex_attention'"):
        BASELINES.get("hf_cb")(model, DecodeRequest(PROMPTS, 2, 2, 0, 0, kw, kv_bytes_per_token(model)))


def test_a_peft_lora_policy_decodes_like_its_own_generate_and_keeps_training_mode():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(random_model("llama", torch.float32), LoraConfig(r=4, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # an adapter that changes the greedy completions
    model.train()
    cfg = SamplerConfig(num_slots=3, max_new_tokens=8, temperature=0.0, decoder="hf_cb")
    out = MicroGroupSampler(model, 2, cfg).sample(PROMPTS, group_size=2, seed=0)
    assert model.training
    model.eval()
    for i, p in enumerate(PROMPTS):
        ref = model.generate(
            input_ids=torch.tensor([p]), do_sample=False, max_new_tokens=8, eos_token_id=2, pad_token_id=0
        )
        want = ref[0, len(p) :].tolist()
        want = want[: want.index(2) + 1] if 2 in want else want
        assert out.completion_ids[2 * i] == out.completion_ids[2 * i + 1] == want
    with model.disable_adapter():
        plain = model.generate(input_ids=torch.tensor([PROMPTS[0]]), do_sample=False, max_new_tokens=8, pad_token_id=0)
    assert plain[0, 4:].tolist()[:8] != out.completion_ids[0]  # the adapter was active in hf_cb's forwards
