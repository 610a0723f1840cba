import torch

from infgrpo.sampler.sampling import filter_logits, sample_tokens


def test_inverse_cdf_sampling_matches_the_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2, 0.0]]))
    gen = torch.Generator().manual_seed(0)
    draws = torch.cat([sample_tokens(logits, [gen], temperature=1.0)[0] for _ in range(20000)])
    freq = torch.bincount(draws, minlength=4).float() / len(draws)
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.2, 0.0]), atol=0.015)
    assert freq[3] == 0  # zero-probability tokens never appear


def test_top_k_and_top_p_filter_and_logprobs_stay_unfiltered():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, top_k=2, top_p=1.0)[0, 2:]).all()
    kept = ~torch.isinf(filter_logits(logits, top_k=0, top_p=0.7))
    assert kept.tolist() == [[True, True, False, False]]
    gen = torch.Generator().manual_seed(1)
    tokens, logp = sample_tokens(logits, [gen] * 1, temperature=1.0, top_p=0.7)
    assert tokens.item() in (0, 1)
    assert torch.allclose(logp, torch.log_softmax(logits, -1)[0, tokens])


def test_each_row_uses_only_its_own_stream():
    logits = torch.zeros(3, 50)
    a = sample_tokens(logits, [torch.Generator().manual_seed(s) for s in (1, 2, 3)], 1.0)[0]
    b = sample_tokens(logits[1:2], [torch.Generator().manual_seed(2)], 1.0)[0]
    assert a[1] == b[0]
