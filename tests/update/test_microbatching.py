import pytest
import torch

from infgrpo.algo import Objective
from infgrpo.update import (
    LossConfig,
    accumulate_policy_gradients,
    frozen_logprobs,
    pack_by_token_budget,
    prepare_microbatches,
    split_microbatches,
)
from infgrpo.update.batching import Frozen, collate
from tests.helpers import random_model


def test_pack_respects_budget_and_covers_every_row():
    prompt_lengths = [5, 17, 3, 9, 9, 30, 1, 12]
    completion_lengths = [4, 1, 20, 9, 2, 6, 3, 12]
    groups = pack_by_token_budget(prompt_lengths, completion_lengths, token_budget=40)
    assert sorted(i for g in groups for i in g) == list(range(8))
    for g in groups:
        padded = len(g) * (max(prompt_lengths[i] for i in g) + max(completion_lengths[i] for i in g))
        assert padded <= 40 or len(g) == 1
    with pytest.raises(ValueError, match="token_budget=0 must be >= 1"):
        pack_by_token_budget(prompt_lengths, completion_lengths, 0)


def test_padded_size_of_collated_microbatches_stays_within_the_budget():
    # long prompts with short completions beside short prompts with long completions: padding to the
    # longest prompt *and* the longest completion is what costs memory
    g = torch.Generator().manual_seed(0)
    for budget in (100, 200, 400):
        prompts = [[5] * int(torch.randint(1, 91, (1,), generator=g)) for _ in range(40)]
        comps = [[7] * int(torch.randint(1, 91, (1,), generator=g)) for _ in range(40)]
        mbs = prepare_microbatches(prompts, comps, budget, pad_id=0)
        assert sorted(r for mb in mbs for r in mb.rows) == list(range(40))
        for mb in mbs:
            assert mb.input_ids.numel() <= budget or len(mb.rows) == 1
    long_prompt, short_prompt, long_answer, short_answer = [5] * 90, [5] * 10, [7] * 90, [7] * 10
    prompts, comps = [long_prompt] * 2 + [short_prompt] * 2, [short_answer] * 2 + [long_answer] * 2
    mixed = prepare_microbatches(prompts, comps, 400, pad_id=0)  # was one micro-batch of 720 tokens
    assert max(mb.input_ids.numel() for mb in mixed) <= 400


def _rollout(seed=0, n=12):
    g = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(3, 100, (int(torch.randint(1, 8, (1,), generator=g)),), generator=g).tolist() for _ in range(n)
    ]
    comps = [
        torch.randint(3, 100, (int(torch.randint(1, 15, (1,), generator=g)),), generator=g).tolist() for _ in range(n)
    ]
    adv = torch.randn(n, generator=g, dtype=torch.float64)
    return prompts, comps, adv


def _freeze(mbs, old=None, ref=None):
    """``mbs`` with the old and reference log-probs (one tensor per micro-batch each, or None) they carry."""
    for k, mb in enumerate(mbs):
        mb.frozen = Frozen(old[k] if old is not None else None, ref[k] if ref is not None else None)
    return mbs


def _grads(model, prompts, comps, adv, budget, cfg, mu_old=False, ref=False):
    model.zero_grad(set_to_none=True)
    mbs = prepare_microbatches(prompts, comps, budget, pad_id=0)
    old = [lp - 0.05 for lp in frozen_logprobs(model, mbs, cfg.temperature)] if mu_old else None
    refl = [lp + 0.1 for lp in frozen_logprobs(model, mbs, cfg.temperature)] if ref else None
    stats = accumulate_policy_gradients(model, _freeze(mbs, old, refl), adv, cfg, lambda loss: loss.backward()).stats
    return stats, len(mbs), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_microbatched_loss_and_gradients_equal_single_batch_float64(loss_type):
    model = random_model("qwen3", torch.float64).train()
    prompts, comps, adv = _rollout()
    cfg = LossConfig(Objective(loss_type=loss_type, beta=0.04), temperature=0.9, max_completion_length=16)
    one, n_one, g_one = _grads(model, prompts, comps, adv, 10_000, cfg, mu_old=True, ref=True)
    many, n_many, g_many = _grads(model, prompts, comps, adv, 40, cfg, mu_old=True, ref=True)
    assert n_one == 1 and n_many >= 4
    assert many["loss"] == pytest.approx(one["loss"], abs=1e-12)
    assert many["kl"] == pytest.approx(one["kl"], abs=1e-12)
    for k in g_one:
        assert torch.allclose(g_one[k], g_many[k], atol=1e-12, rtol=1e-9), k
    assert any(g.abs().sum() > 0 for g in g_one.values())


def test_padded_microbatches_match_unpadded_per_sequence_recomputation():
    """Loss and gradients against a float64 recomputation with one unpadded forward per sequence."""
    model = random_model("llama", torch.float64).train()
    prompts, comps, adv = _rollout(seed=3, n=5)
    cfg = LossConfig(Objective(loss_type="grpo"), max_completion_length=16, temperature=0.7)
    stats, n_mb, grads = _grads(model, prompts, comps, adv, 30, cfg)
    assert n_mb > 1
    model.zero_grad(set_to_none=True)
    total = 0.0
    for p, c, a in zip(prompts, comps, adv.tolist(), strict=True):
        logits = model(torch.tensor([p + c])).logits[0, len(p) - 1 : -1] / 0.7
        lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c)[:, None]).squeeze(-1)
        loss = (-(torch.exp(lp - lp.detach()) * a)).mean() / 5  # grpo: mean over sequences of token means
        loss.backward()
        total += loss.item()
    assert stats["loss"] == pytest.approx(total, abs=1e-12)
    for k, p in model.named_parameters():
        assert torch.allclose(grads[k], p.grad, atol=1e-10), k


def test_split_halves_equal_freshly_collated_halves_with_their_logprobs():
    prompts, comps, _ = _rollout(seed=3, n=7)
    mb = collate(list(range(7)), prompts, comps, pad_id=0)
    old = torch.randn(7, mb.completion_ids.shape[1], dtype=torch.float64)
    halves = split_microbatches(_freeze([mb], [old]))
    assert [h.rows for h in halves] == [[0, 1, 2], [3, 4, 5, 6]] and all(h.frozen.ref is None for h in halves)
    for half, o in zip(halves, [h.frozen.old for h in halves], strict=True):
        fresh = collate(half.rows, prompts, comps, pad_id=0)  # trimmed to the half's own padding
        for name in ("input_ids", "attention_mask", "position_ids", "completion_ids", "completion_mask"):
            assert torch.equal(getattr(half, name), getattr(fresh, name)), name
        assert torch.equal(o, old[half.rows, : fresh.completion_ids.shape[1]])
    one = collate([2], prompts, comps, pad_id=0)
    assert split_microbatches([one]) == [one]  # a single row cannot be split


def test_gradients_after_splitting_equal_the_unsplit_ones_float64():
    model = random_model("llama", torch.float64).train()
    prompts, comps, adv = _rollout(seed=4)
    cfg = LossConfig(Objective(loss_type="dapo", beta=0.04), max_completion_length=16)
    mbs = prepare_microbatches(prompts, comps, 10_000, pad_id=0)
    old = [lp - 0.05 for lp in frozen_logprobs(model, mbs, 1.0)]
    ref = [lp + 0.1 for lp in frozen_logprobs(model, mbs, 1.0)]
    _freeze(mbs, old, ref)

    def grads(mbs):
        model.zero_grad(set_to_none=True)
        stats = accumulate_policy_gradients(model, mbs, adv, cfg, lambda loss: loss.backward()).stats
        return stats, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    whole, g_whole = grads(mbs)
    for _ in range(2):  # 1 -> 2 -> 4 micro-batches, their old and reference log-probs split alike
        mbs = split_microbatches(mbs)
    assert len(mbs) == 4 and all(mb.frozen.old is not None and mb.frozen.ref is not None for mb in mbs)
    split, g_split = grads(mbs)
    assert split["loss"] == pytest.approx(whole["loss"], abs=1e-12) and split["kl"] == pytest.approx(whole["kl"])
    for k in g_whole:
        assert torch.allclose(g_whole[k], g_split[k], atol=1e-12, rtol=1e-9), k
