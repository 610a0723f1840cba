"""The slot-pool engine against independent references (HF generate, a training forward)."""

import gc
import weakref

import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.engine.counter_rng import counter_uniform, stream_key
from infgrpo.sampler.engine.slot_pool import pool_width
from infgrpo.sampler.model_support import kv_bytes_per_token
from tests.helpers import random_model

PROMPTS = [[5, 9, 11, 40], [7], [3, 30, 31, 32, 33, 34, 35], [60, 61]]


def hf_greedy(model, prompt, max_new_tokens, eos=2):
    out = model.generate(
        torch.tensor([prompt]), do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=0
    )[0, len(prompt) :].tolist()
    return out[: out.index(eos) + 1] if eos in out else out


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("num_slots", [1, 3, 8])
@pytest.mark.parametrize("group_size", [1, 4, 9])
def test_greedy_engine_is_token_identical_to_hf_generate(arch, num_slots, group_size):
    model = random_model(arch, torch.float64, seed=1)
    cfg = SamplerConfig(num_slots=num_slots, max_new_tokens=10, temperature=0.0)
    out = MicroGroupSampler(model, 2, cfg).sample(PROMPTS, group_size, seed=0)
    for i, p in enumerate(PROMPTS):
        want = hf_greedy(model, p, 10)
        assert all(out.completion_ids[i * group_size + j] == want for j in range(group_size))


def test_greedy_engine_stops_exactly_like_generate_on_the_shipped_model(tiny_model, tokenizer, prompts):
    """The shipped model stops at EOS at different lengths; the engine must stop exactly like generate."""
    out = MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(num_slots=2, max_new_tokens=60, temperature=0.0))
    res = out.sample(prompts, 3, seed=0)
    for i, p in enumerate(prompts):
        want = hf_greedy(tiny_model, p, 60, eos=tokenizer.eos_token_id)
        assert res.completion_ids[i * 3] == want
        assert res.finish_reasons[i * 3] == "stop"


def test_sampling_is_identical_across_slot_counts_and_decoders_float64():
    model = random_model("qwen3", torch.float64, seed=2)
    outs = [
        MicroGroupSampler(model, 2, SamplerConfig(num_slots=n, max_new_tokens=12, top_k=40, top_p=0.9))
        .sample(PROMPTS, 6, seed=11)
        .completion_ids
        for n in (1, 2, 5, 16)
    ]
    assert all(o == outs[0] for o in outs[1:])
    other_seed = MicroGroupSampler(model, 2, SamplerConfig(num_slots=5, max_new_tokens=12)).sample(PROMPTS, 6, seed=12)
    assert other_seed.completion_ids != outs[0]
    assert len({tuple(c) for c in outs[0][:6]}) > 1  # samples of one prompt differ


def test_refilled_slots_and_interleaved_prompts_keep_the_pool_busy():
    model = random_model("llama", torch.float64, seed=3)
    out = MicroGroupSampler(model, 2, SamplerConfig(num_slots=4, max_new_tokens=8)).sample(PROMPTS, 5, seed=0)
    st = out.stats
    # every sequence of the 4 prompts x 5 samples ran, in some slot, over a contiguous span of steps
    assert sorted((p, j) for _, p, j, _, _ in st["timeline"]) == [(p, j) for p in range(4) for j in range(5)]
    length = {(i // 5, i % 5): n for i, n in enumerate(out.lengths)}
    for slot, p, j, start, end in st["timeline"]:  # a one-token completion never takes a slot (slot -1)
        assert (0 <= slot < 4 and start <= end) or (slot == -1 and start == end and length[p, j] == 1)
    # continuous refill: with 20 sequences of <= 8 tokens on 4 slots, the lower bound is 5 x 7 steps
    lengths = out.lengths
    bound = max(max(lengths) - 1, -(-sum(n - 1 for n in lengths) // 4))
    assert bound <= st["decode_steps"] <= bound + 8
    assert st["prefill_tokens"] == sum(map(len, PROMPTS))  # each prompt prefilled once
    assert 0.7 < st["slot_utilization"] <= 1.0


def test_kv_held_is_bounded_by_the_pool_whatever_the_group_size():
    model = random_model("qwen3", torch.float32, seed=4)
    per_token = kv_bytes_per_token(model)
    held = []
    for g in (2, 16, 64):
        out = MicroGroupSampler(model, 2, SamplerConfig(num_slots=4, max_new_tokens=6)).sample(PROMPTS[:1], g, seed=0)
        held.append(out.stats["kv_bytes_peak"])
        # 4 slots of the pool's width (prompt + 6 new tokens, rounded up to 128) and one prompt's K/V
        assert out.stats["kv_bytes_peak"] <= (4 * pool_width(len(PROMPTS[0]) + 6) + len(PROMPTS[0])) * per_token
    assert held[1] == held[2]  # flat in G once the pool is full


def test_one_token_prompts_and_max_new_tokens_one():
    model = random_model("llama", torch.float64)
    prompts = [[7], [8, 9]]
    out = MicroGroupSampler(model, 2, SamplerConfig(num_slots=3, max_new_tokens=1)).sample(prompts, 4, seed=0)
    assert out.lengths == [1] * 8 and out.stats["decode_steps"] == 0  # first tokens come from the prefill
    # each first token is the inverse-CDF draw of its stream's uniform at t = 0 from a plain forward of the prompt
    want = []
    for i, p in enumerate(prompts):
        cdf = torch.softmax(model(input_ids=torch.tensor([p])).logits[0, -1], -1).cumsum(0)
        for j in range(4):
            k0, k1 = (torch.tensor(k) for k in stream_key(0, i, j))
            u = counter_uniform(k0, k1, torch.tensor(0), torch.float64)
            want.append([int((cdf <= u * cdf[-1]).sum())])
    assert out.completion_ids == want
    assert out.finish_reasons == ["stop" if c == [2] else "length" for c in want]  # eos 2 stops, else length


def test_peft_lora_model_decodes_like_its_generate():
    from peft import LoraConfig, get_peft_model

    model = random_model("qwen3", torch.float64, seed=5)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False)).eval()
    out = MicroGroupSampler(peft_model, 2, SamplerConfig(num_slots=3, max_new_tokens=8, temperature=0.0))
    res = out.sample(PROMPTS, 2, seed=0)
    for i, p in enumerate(PROMPTS):
        assert res.completion_ids[i * 2] == hf_greedy(peft_model, p, 8)


def test_4bit_model_decodes_like_its_generate(tmp_path):
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    random_model("llama", torch.float32, seed=6).save_pretrained(tmp_path)
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, quantization_config=q).eval()
    out = MicroGroupSampler(model, 2, SamplerConfig(num_slots=2, max_new_tokens=8, temperature=0.0))
    res = out.sample(PROMPTS[:2], 2, seed=0)
    for i, p in enumerate(PROMPTS[:2]):
        assert res.completion_ids[i * 2] == hf_greedy(model, p, 8)


def test_bfloat16_behaviour_logprobs_match_a_bfloat16_training_forward():
    from infgrpo.update import collate, completion_logprobs

    model = random_model("qwen3", torch.bfloat16, seed=7)
    res = MicroGroupSampler(model, 2, SamplerConfig(num_slots=3, max_new_tokens=10)).sample(PROMPTS, 3, seed=0)
    mb = collate(list(range(len(res))), [res.prompt_ids[i] for i in res.prompt_index], res.completion_ids, 0)
    with torch.no_grad():
        lp = completion_logprobs(model, mb)
    for i in range(len(res)):
        n = res.lengths[i]
        assert torch.allclose(lp[i, :n], res.logprobs[i].float(), atol=0.1)


def test_the_pool_is_kept_between_rollouts_and_grows_only_when_slots_must_be_longer():
    model = random_model("qwen3", torch.float32, seed=8)
    sampler = MicroGroupSampler(model, 2, SamplerConfig(num_slots=4, max_new_tokens=40, keep_pool=True))
    first = sampler.sample(PROMPTS, 3, seed=0)
    pool = sampler.pools.pool
    second = sampler.sample(PROMPTS[:2], 3, seed=1)
    assert sampler.pools.pool is pool and sampler.pools.allocations == 1  # reused, same shape
    assert first.stats["pool_positions"] == second.stats["pool_positions"] == 128
    sampler.sample([[5] * 100], 4, seed=2)  # 100 + 40 positions: the slots must grow to 256
    assert sampler.pools.allocations == 2 and sampler.pools.pool.max_len == 256
    again = sampler.sample(PROMPTS, 3, seed=0)  # the longer pool serves shorter rollouts unchanged
    assert sampler.pools.allocations == 2 and again.completion_ids == first.completion_ids
    for keep in (False, "auto"):  # 'auto' keeps it on CUDA only
        lean = MicroGroupSampler(model, 2, SamplerConfig(num_slots=4, max_new_tokens=40, keep_pool=keep))
        assert lean.sample(PROMPTS, 3, seed=0).completion_ids == first.completion_ids
        assert lean.pools.pool is None and not lean.keeps_pool()  # freed after the rollout
    with pytest.raises(ValueError, match="keep_pool='yes' must be true, false or 'auto'"):
        SamplerConfig(keep_pool="yes")


def test_a_released_pool_frees_its_kv_without_a_garbage_collection():
    """Pool and layers hold no reference cycle: a CPU rollout that drops its pool frees the K/V at once, so releasing
    it needs no full garbage collection (which walks every object of the process)."""
    model = random_model("qwen3", torch.float32, seed=8)
    sampler = MicroGroupSampler(model, 2, SamplerConfig(num_slots=4, max_new_tokens=8, keep_pool=True))
    sampler.sample(PROMPTS, 2, seed=0)
    kv = weakref.ref(sampler.pools.pool.kv)
    collections = gc.get_stats()[2]["collections"]
    gc.disable()
    try:
        sampler.release()
        assert kv() is None  # freed by its last reference going
    finally:
        gc.enable()
    assert gc.get_stats()[2]["collections"] == collections  # and no full collection ran to free it


def test_cuda_graphs_on_without_cuda_is_a_clear_error_and_bad_names_are_refused():
    model = random_model("llama", torch.float32)
    with pytest.raises(ValueError, match="cuda_graphs='on' needs a CUDA device; the model is on cpu"):
        MicroGroupSampler(model, 2, SamplerConfig(cuda_graphs="on")).sample(PROMPTS[:1], 2)
    with pytest.raises(ValueError, match="cuda_graphs='yes' is not known; valid: auto, on, off"):
        SamplerConfig(cuda_graphs="yes")
    with pytest.raises(ValueError, match="decode_attention='flash' is not known; valid: efficient, cudnn, math, auto"):
        SamplerConfig(decode_attention="flash")


def test_prompts_admitted_together_are_prefilled_in_one_forward_and_decode_like_alone():
    model = random_model("llama", torch.float64, seed=9)
    cfg = SamplerConfig(num_slots=16, max_new_tokens=9, temperature=1.0, top_k=30)
    together = MicroGroupSampler(model, 2, cfg).sample(PROMPTS, 4, seed=3)  # 16 sequences, one round
    assert together.stats["prefill_calls"] == 1 and together.stats["prefill_tokens"] == sum(map(len, PROMPTS))
    for i, p in enumerate(PROMPTS):  # left-padded batch vs each prompt alone (its global index as offset)
        alone = MicroGroupSampler(model, 2, cfg).sample([p], 4, seed=3, prompt_offset=i)
        assert alone.completion_ids == together.completion_ids[i * 4 : (i + 1) * 4]
        for a, b in zip(alone.logprobs, together.logprobs[i * 4 : (i + 1) * 4], strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
