import torch

from infgrpo.sampler.engine.counter_rng import counter_uniform, stream_key
from infgrpo.sampler.engine.sampling import filter_logits, sample_tokens


def uniforms(n: int) -> torch.Tensor:
    """n counter-based uniforms of one stream, positions 0..n-1, as (1, n)."""
    k0, k1 = stream_key(0, 0, 0)
    return counter_uniform(torch.tensor(k0), torch.tensor(k1), torch.arange(n), torch.float32).unsqueeze(0)


def test_inverse_cdf_sampling_matches_the_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2, 0.0]]))
    draws, logp = sample_tokens(logits, uniforms(20000), temperature=1.0)  # 20,000 draws from one row
    freq = torch.bincount(draws[0], minlength=4).float() / draws.numel()
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.2, 0.0]), atol=0.015)
    assert freq[3] == 0  # zero-probability tokens never appear
    assert torch.allclose(logp[0], torch.log(torch.tensor([0.5, 0.3, 0.2]))[draws[0]])


def test_top_k_and_top_p_filter_and_logprobs_stay_unfiltered():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, top_k=2, top_p=1.0)[0, 2:]).all()
    kept = ~torch.isinf(filter_logits(logits, top_k=0, top_p=0.7))
    assert kept.tolist() == [[True, True, False, False]]
    tokens, logp = sample_tokens(logits, uniforms(2000), temperature=1.0, top_p=0.7)
    assert set(tokens.flatten().tolist()) == {0, 1}
    assert torch.allclose(logp, torch.log_softmax(logits, -1)[0, tokens])


def test_a_uniform_at_the_top_never_picks_a_filtered_token():
    # the largest uniforms, where u * cdf[-1] may round up to cdf[-1]; the last tokens are filtered out
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, -3.0]])
    top = torch.tensor([[1 - 2.0**-24, 1 - 2.0**-23, 0.9999999, 1.0]])
    for top_k in (0, 2, 3):
        tokens, _ = sample_tokens(logits, top, temperature=0.7, top_k=top_k)
        assert tokens.max() <= (top_k - 1 if top_k else 4)
    tokens, _ = sample_tokens(logits, torch.tensor([[0.0]]), temperature=1.0)
    assert tokens.item() == 0


def test_each_row_draws_with_its_own_uniform_whatever_the_batch():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    u = torch.tensor([[0.1], [0.5], [0.93]])
    batch = sample_tokens(logits, u, 1.0, top_k=20)[0]
    for i in range(3):
        assert sample_tokens(logits[i : i + 1], u[i : i + 1], 1.0, top_k=20)[0].item() == batch[i].item()


def test_greedy_takes_the_argmax_and_its_log_prob():
    logits = torch.tensor([[0.1, 3.0, 0.2], [5.0, 0.0, 0.0]])
    tokens, logp = sample_tokens(logits, torch.zeros(2, 3), temperature=0.0)
    assert tokens.tolist() == [[1, 1, 1], [0, 0, 0]]
    assert torch.allclose(logp[:, 0], torch.log_softmax(logits, -1).max(-1).values)
