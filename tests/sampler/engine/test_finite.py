"""Non-finite logits stop a rollout with one error naming where (the prefill, decode step N), never an index error."""

import math

import numpy as np
import pytest
import torch

from infgrpo.policy.load import load_policy
from infgrpo.sampler import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.engine.finite import NonFiniteLogitsError, check_logprobs
from infgrpo.sampler.engine.sampling import sample_tokens

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 5, 1.0), (1.0, 0, 0.9), (0.0, 0, 1.0)]
)
def test_non_finite_logits_give_tokens_in_the_vocabulary_and_nan_logprobs(temperature, top_k, top_p):
    V = 103
    logits = torch.randn(4, V, generator=torch.Generator().manual_seed(0))
    bad = logits.clone()
    bad[1] = NAN  # every logit NaN
    bad[2, 7] = INF  # one overflowed logit
    bad[3, ::2] = NAN
    u = torch.tensor([[0.0], [0.5], [0.999], [1 - 2.0**-24]])
    tokens, logps = sample_tokens(bad, u, temperature, top_k, top_p)  # no IndexError
    assert tokens.min() >= 0 and tokens.max() < V
    assert not torch.isfinite(logps[1:]).any()  # what the host sees
    clean_tokens, clean_logps = sample_tokens(logits[:1], u[:1], temperature, top_k, top_p)
    assert torch.equal(tokens[:1], clean_tokens) and torch.equal(logps[:1], clean_logps)  # rows stay independent


def test_check_logprobs_names_where_and_how_many():
    check_logprobs(np.array([-0.1, -2.0, 0.0]), "decode step 1")
    with pytest.raises(NonFiniteLogitsError, match=r"^non-finite logits at decode step 7: .* for 2 of 3 sequences"):
        check_logprobs(np.array([math.nan, -1.0, -math.inf]), "decode step 7")
    with pytest.raises(NonFiniteLogitsError, match="at the prefill: .* for 1 of 1 prompts") as caught:
        check_logprobs(np.array([math.nan]), "the prefill", "prompts")
    assert (caught.value.where, caught.value.rows, caught.value.total) == ("the prefill", 1, 1)


def test_a_float16_model_with_an_inf_weight_stops_at_the_prefill_not_with_an_index_error(prompts, tokenizer):
    model = load_policy("tiny", dtype="float16").eval()
    sampler = MicroGroupSampler(model, tokenizer, SamplerConfig(num_slots=4, max_new_tokens=8))
    assert sampler.sample(prompts[:2], 2, seed=0).logprobs  # healthy: samples
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[0, 0] = INF
    with pytest.raises(NonFiniteLogitsError, match="non-finite logits at the prefill: .* for 2 of 2 prompts"):
        sampler.sample(prompts[:2], 2, seed=0)


@pytest.mark.parametrize("decode_width", ["busy", "pool"])
def test_logits_that_turn_non_finite_while_decoding_name_the_decode_step(tiny_model, prompts, tokenizer, decode_width):
    decodes = []

    def poison(module, args, kwargs, output):  # from the third decode forward on (one query token), NaN logits
        if kwargs["input_ids"].shape[-1] == 1:
            decodes.append(1)
            if len(decodes) >= 3:
                output.logits.fill_(NAN)
        return output

    cfg = SamplerConfig(num_slots=4, max_new_tokens=16, decode_width=decode_width)
    sampler = MicroGroupSampler(tiny_model, tokenizer, cfg)
    hook = tiny_model.register_forward_hook(poison, with_kwargs=True)
    message = r"^non-finite logits at decode step 3: .* for [1-4] of [1-4] sequences"  # those still running
    try:
        with pytest.raises(NonFiniteLogitsError, match=message):
            sampler.sample(prompts[:2], 2, seed=0)
    finally:
        hook.remove()
