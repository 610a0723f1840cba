import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.engine.slot_pool import pool_width
from infgrpo.sampler.model_support import context_overflow, kv_bytes_per_token, sequence_positions
from infgrpo.update import collate, completion_logprobs
from tests.helpers import random_model


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("decoder", ["engine", "micro_groups", "hf_micro", "hf_cb"])
def test_greedy_matches_hf_generate(arch, decoder):
    model = random_model(arch, torch.float64)
    prompts = [[5, 9, 11, 40], [7], [3, 30, 31, 32, 33, 34, 35]]
    s = MicroGroupSampler(model, 2, SamplerConfig(num_slots=3, max_new_tokens=12, temperature=0.0, decoder=decoder))
    out = s.sample(prompts, group_size=4, seed=0)
    for i, p in enumerate(prompts):
        ref = model.generate(torch.tensor([p]), do_sample=False, max_new_tokens=12, eos_token_id=2, pad_token_id=0)
        want = ref[0, len(p) :].tolist()
        want = want[: want.index(2) + 1] if 2 in want else want
        for j in range(4):
            assert out.completion_ids[i * 4 + j] == want


def test_prefill_once_gives_the_same_samples_as_prefill_every_round():
    model = random_model("qwen3", torch.float64)
    prompts = [[5, 9, 11, 40], [7, 8]]
    cfg = dict(num_slots=3, max_new_tokens=10, temperature=1.0)
    a = MicroGroupSampler(model, 2, SamplerConfig(decoder="micro_groups", **cfg)).sample(prompts, 7, seed=3)
    b = MicroGroupSampler(model, 2, SamplerConfig(decoder="hf_micro", **cfg)).sample(prompts, 7, seed=3)
    assert a.completion_ids == b.completion_ids
    assert a.stats["prefill_tokens"] == 3 + 1  # prompt[:-1] once per prompt
    assert b.stats["prefill_tokens"] == 3 * 4 + 3 * 2  # whole prompt, every one of the 3 rounds


@pytest.mark.parametrize("decoder", ["engine", "micro_groups", "hf_full", "hf_cb"])  # hf_cb: no top-k / top-p here
def test_behaviour_logprobs_match_a_training_forward(tiny_model, tokenizer, prompts, decoder):
    cfg = SamplerConfig(num_slots=4, max_new_tokens=40, temperature=0.8, decoder=decoder)
    s = MicroGroupSampler(tiny_model, tokenizer, cfg)
    out = s.sample(prompts, group_size=5, seed=1)
    rows = list(range(len(out)))
    mb = collate(rows, [out.prompt_ids[i] for i in out.prompt_index], out.completion_ids, tokenizer.pad_token_id)
    with torch.no_grad():
        lp = completion_logprobs(tiny_model, mb, temperature=0.8)
    for i in rows:
        n = len(out.completion_ids[i])
        assert torch.allclose(lp[i, :n], out.logprobs[i], atol=1e-4)


def test_seed_reproducibility_and_prompt_major_order(tiny_model, tokenizer, prompts):
    s = MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(num_slots=3, max_new_tokens=40))
    a, b = s.sample(prompts, 4, seed=7), s.sample(prompts, 4, seed=7)
    c = s.sample(prompts, 4, seed=8)
    assert a.completion_ids == b.completion_ids
    assert a.completion_ids != c.completion_ids
    assert a.prompt_index == [0] * 4 + [1] * 4 + [2] * 4
    texts = tokenizer.batch_decode(a.completion_ids[4:8], skip_special_tokens=True)
    assert all(t[:1].isdigit() for t in texts)  # the count prompt's samples hold numbers


def test_max_new_tokens_respected_and_finish_reasons(tiny_model, tokenizer, prompts):
    s = MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(num_slots=8, max_new_tokens=3))
    out = s.sample(prompts, 4, seed=0)
    for ids, reason in zip(out.completion_ids, out.finish_reasons, strict=True):
        assert len(ids) <= 3
        assert reason == ("stop" if ids[-1] == tokenizer.eos_token_id else "length")
    assert "length" in out.finish_reasons  # count 3 9 needs 13 tokens


def test_extra_stop_token_ends_completions(tiny_model, tokenizer, prompts):
    space = tokenizer.convert_tokens_to_ids(" ")
    s = MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(max_new_tokens=40, stop_token_ids=[space]))
    out = s.sample(prompts[1:2], 4, seed=0)  # counting emits spaces
    assert all(ids[-1] == space and ids.count(space) == 1 for ids in out.completion_ids)
    assert set(out.finish_reasons) == {"stop"}


def test_generation_config_eos_ids_stop_like_hf_generate(tokenizer, prompts):
    # chat models list several EOS ids in generation_config (Qwen3: <|im_end|> and <|endoftext|>)
    from infgrpo.policy.load import load_policy

    model = load_policy("tiny").eval()
    space = tokenizer.convert_tokens_to_ids(" ")
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, space]
    out = MicroGroupSampler(model, tokenizer, SamplerConfig(max_new_tokens=40, temperature=0.0)).generate_one(prompts)
    for p, got in zip(prompts, out.completion_ids, strict=True):
        ref = model.generate(torch.tensor([p]), do_sample=False, max_new_tokens=40, pad_token_id=0)[0, len(p) :]
        want = ref.tolist()
        ends = [k for k, t in enumerate(want) if t in (tokenizer.eos_token_id, space)]
        assert got == (want[: ends[0] + 1] if ends else want)
    assert any(ids[-1] == space for ids in out.completion_ids)  # the second EOS id did end a completion


def test_group_larger_than_pool_and_pool_larger_than_group(tiny_model, tokenizer, prompts):
    small = MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(num_slots=2, max_new_tokens=20))
    big = MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(num_slots=64, max_new_tokens=20))
    a, b = small.sample(prompts, 5, seed=0), big.sample(prompts, 5, seed=0)
    assert len(a) == len(b) == 15
    # the pool bounds the KV held: 2 slots of prompt + max_new_tokens (rounded up to 128), plus one prompt's prefix
    per_slot = pool_width(max(map(len, prompts)) + 20) * kv_bytes_per_token(tiny_model)
    assert a.stats["kv_bytes_peak"] <= 3 * per_slot < b.stats["kv_bytes_peak"]
    assert 0 < a.stats["slot_utilization"] <= 1


def test_prompt_longer_than_context_is_a_clear_error(tiny_model, tokenizer):
    s = MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(max_new_tokens=100))
    with pytest.raises(ValueError, match=r"prompt_ids\[1\] has 200 tokens.*max_position_embeddings\) is 256"):
        s.sample([[5, 6], [5] * 200], group_size=2)
    with pytest.raises(ValueError, match=r"prompt_ids\[0\] is empty"):
        s.sample([[]], group_size=2)


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("num_slots", 0, "num_slots=0 must be an integer >= 1"),
        ("max_new_tokens", 0, "max_new_tokens=0 must be an integer > 0"),
        ("top_p", 0.0, r"top_p=0.0 must be in \(0, 1\]"),
        ("temperature", -1.0, "temperature=-1.0 must be >= 0"),
        ("decoder", "vllm", "decoder='vllm' is not known; valid: engine, micro_groups, hf_micro, hf_full, hf_cb"),
        ("refill", "srpt", "refill='srpt' is not known; valid: fifo, sjf, lpt, planned"),
        ("planner", "dp", "planner='dp' is not known; valid: auto, lpt, fptas"),
        ("planner", "ptas", "planner='ptas' is not known; valid: auto, lpt, fptas"),  # the alias went in 0.3
        ("planner_epsilon", 0.0, "planner_epsilon=0.0 must be > 0"),
        ("length_predictor", "bert", "length_predictor='bert' is not known; valid: learned, history, none"),
    ],
)
def test_config_validation(field, value, match):
    with pytest.raises(ValueError, match=match):
        SamplerConfig(**{field: value})


def sliding_qwen3(window):
    """A tiny Qwen3 whose second layer attends within ``window`` positions (float64, eos 2)."""
    return random_model("qwen3", torch.float64, use_sliding_window=True, sliding_window=window, max_window_layers=1)


def uncarried_window(window):
    """A tiny Mistral config: every layer attends within ``window`` positions, and it names no ``layer_types``, so
    the engine's masks do not carry its window (a sequence stays below it)."""
    from transformers import MistralConfig

    return MistralConfig(vocab_size=103, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, sliding_window=window)  # fmt: skip


def sliding_gemma3_text(window):
    """A tiny text Gemma 3 (float64, eos 2): sliding, full and sliding layers, each kind with its rotary base; its head
    untied (through a tied one, embeddings x sqrt(hidden) make a random model repeat its last token)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=103, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
                              sliding_window=window, sliding_window_pattern=2, eos_token_id=2, pad_token_id=0,
                              bos_token_id=1, initializer_range=0.2, tie_word_embeddings=False)  # fmt: skip
    return Gemma3ForCausalLM(config).to(torch.float64).eval()


@pytest.mark.parametrize("build", [sliding_qwen3, sliding_gemma3_text])
def test_sliding_window_models_decode_like_hf_past_the_window(build):
    """Full and sliding layers (``layer_types``): the engine's masks close the keys a window or more behind on the
    sliding layers, in the prefill (prompts of two lengths, left-padded) and every decode step."""
    model = build(window=4)
    assert "sliding_attention" in model.config.layer_types
    prompts = [[5, 9, 11, 40, 7, 8], [3, 12, 13]]
    s = MicroGroupSampler(model, 2, SamplerConfig(num_slots=3, max_new_tokens=12, temperature=0.0))
    got = s.sample(prompts, group_size=2).completion_ids
    for i, prompt in enumerate(prompts):
        ref = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=12, eos_token_id=2, pad_token_id=0)
        want = ref[0, len(prompt) :].tolist()
        assert got[2 * i] == got[2 * i + 1] == (want[: want.index(2) + 1] if 2 in want else want)
    assert max(len(p) + len(c) for p, c in zip([p for p in prompts for _ in "ab"], got, strict=True)) > 8


def test_a_window_the_masks_do_not_carry_is_refused_beyond_it():
    from transformers import MistralForCausalLM

    model = MistralForCausalLM(uncarried_window(12)).eval()
    s = MicroGroupSampler(model, 2, SamplerConfig(num_slots=2, max_new_tokens=7, temperature=0.0))
    with pytest.raises(ValueError, match=r"prompt_ids\[0\] has 6 tokens; .*\(sliding_window=12\)"):
        s.sample([[5, 9, 11, 40, 7, 8]], group_size=2)
    with pytest.raises(ValueError, match=r"max_new_tokens=12 does not fit .*\(sliding_window=12\)"):
        MicroGroupSampler(model, 2, SamplerConfig(max_new_tokens=12))


def test_the_context_rule_gives_a_positive_bound_or_says_the_prompt_alone_is_too_long():
    windowed = uncarried_window(12)  # a sequence stays below the window: 11 positions
    assert sequence_positions(windowed) == 11 and context_overflow(windowed, 6, 5) is None
    assert context_overflow(windowed, 6, 6).endswith("Shorten the prompt or lower max_new_tokens to <= 5.")
    alone = context_overflow(windowed, 11, 1)
    assert "(sliding_window=12)" in alone
    assert alone.endswith("stays below 12; the prompt alone takes 11 of them, leaving no room for a completion.")
    carried = sliding_qwen3(window=12).config  # the masks carry its window: the context is the bound
    assert sequence_positions(carried) == carried.max_position_embeddings
    full = random_model("llama").config
    positions = full.max_position_embeddings
    assert sequence_positions(full) == positions and context_overflow(full, positions - 1, 1) is None
    past = context_overflow(full, positions + 38, 64)  # a long system prompt: once "max_new_tokens <= -38"
    assert f"is {positions}; the prompt alone takes {positions + 38} of them, leaving no room" in past
    assert "<=" not in past


def test_attention_implementations_the_engine_cannot_drive_are_refused():
    model = random_model("llama")
    model.config._attn_implementation = "flex_attention"
    with pytest.raises(ValueError, match="attn_implementation='flex_attention'; the slot-pool engine needs 'sdpa'"):
        MicroGroupSampler(model, 2, SamplerConfig())
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        MicroGroupSampler(random_model("llama"), 2, SamplerConfig()).sample([], 2)


def test_evaluation_decodes_on_the_slots_a_rollout_of_its_prompts_gets_at_most(tiny_model, tokenizer, prompts):
    from infgrpo.sampler.pool_sizing import PoolSizer, plan_pool, pool_shape

    def evaluate(batch_size, **cfg):
        config = SamplerConfig(max_new_tokens=20, temperature=0.0, **cfg)
        return MicroGroupSampler(tiny_model, tokenizer, config).generate_one(prompts, batch_size=batch_size)

    fixed, capped = evaluate(128, num_slots=2), evaluate(2, num_slots=64)
    assert fixed.stats["num_slots"] == capped.stats["num_slots"] == 2
    width = pool_width(max(map(len, prompts)) + 20)
    one = plan_pool(10**9, pool_shape(tiny_model), width, sum(map(len, prompts)))
    budget = one.prompt_kv_bytes + 2 * one.slot_bytes + 1  # what 'auto' plans as 2 slots for these prompts
    assert PoolSizer("auto", budget, 20).slots(tiny_model, prompts) == 2
    planned = evaluate(128, num_slots="auto", rollout_memory=budget)
    assert planned.stats["num_slots"] == 2
    assert (
        fixed.completion_ids
        == capped.completion_ids
        == planned.completion_ids
        == evaluate(128, num_slots=8).completion_ids
    )
