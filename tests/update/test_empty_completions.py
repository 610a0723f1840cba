"""Empty completions (``hf_cb`` can return one; ``PolicyUpdate`` is public) anywhere in a batch: alone in a
micro-batch, all of the batch, or among others. The chunked head and the full logits give the same loss and
gradients, shared prompt on and off, and both equal the update on the batch without its empty rows (an empty
row adds no token, so a token-normalized loss is the same without it).
"""

import pytest
import torch

from infgrpo.algo import Objective
from infgrpo.sampler import Rollouts
from infgrpo.update.config import UpdateConfig
from infgrpo.update.runner import PolicyUpdate
from tests.helpers import float64_norms, random_model

PROMPTS = [[1, 5, 7, 9], [3, 4], [8, 9, 10, 11, 12]]  # 3 prompts x G=3
CASES = {  # completions, and the budget that packs them as the case says
    "alone": ([[20, 21, 22], [30, 31, 32, 33], [], [40, 41], [42], [43, 44, 45], [50], [], [51, 52]], 14),
    "all": ([[]] * 9, 14),
    "mixed": ([[20, 21], [], [22], [], [30, 31, 32], [33], [40], [41, 42], []], 4096),
}
ADVANTAGES = torch.tensor([1.0, -0.5, 0.3, -1.2, 0.8, 0.4, -0.7, 0.2, 0.6], dtype=torch.float64)
OBJECTIVE = Objective(loss_type="dapo", beta=0.04, top_entropy_quantile=0.5, entropy_coef=0.01)


def update(rollouts, advantages, chunk, share, budget):
    """Loss and gradients of one PolicyUpdate (reference and entropy-mask passes included), and its micro-batches."""
    policy = float64_norms(random_model("qwen3", torch.float64)).train()
    ref = float64_norms(random_model("qwen3", torch.float64, seed=5))
    grads = {}

    def keep() -> None:  # the optimizer step: keeps the accumulated gradients
        grads.update({k: p.grad.clone() for k, p in policy.named_parameters() if p.grad is not None})

    update = UpdateConfig(token_budget=budget, logit_chunk_tokens=chunk, skip_zero_advantage="off")
    updater = PolicyUpdate(update, OBJECTIVE, temperature=0.8, max_completion_length=8, share_prompt=share)
    result = updater.run(
        policy, rollouts, advantages, lambda x: x.backward(), keep, lambda: policy.zero_grad(set_to_none=True), ref
    )
    return result.stats["loss"], grads, updater.pack(rollouts, budget)


def rollouts_of(completions, group=3, prompts=PROMPTS):
    return Rollouts(prompts, group, completions, [torch.full((len(c),), -1.0) for c in completions], ["stop"] * 9)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("share", [False, True])
def test_empty_completions_give_the_same_loss_and_gradients_on_the_chunked_and_full_paths_float64(case, share):
    completions, budget = CASES[case]
    rollouts = rollouts_of(completions)
    kept = [i for i, c in enumerate(completions) if c]
    if kept:  # the reference: the batch without its empty rows, one micro-batch, unshared, full logits
        rows = rollouts_of([completions[i] for i in kept], 1, [PROMPTS[i // 3] for i in kept])
        rows.finish_reasons = ["stop"] * len(kept)
        want_loss, want, _ = update(rows, ADVANTAGES[kept], 0, False, 4096)
        assert abs(want_loss) > 1e-4 and len(want) >= 20 and all(g.abs().max() > 0 for g in want.values())
    for chunk in (0, 1, 4):
        loss, grads, mbs = update(rollouts, ADVANTAGES, chunk, share, budget)
        empty = [int(mb.completion_mask.sum()) == 0 for mb in mbs]
        if case == "alone":  # a micro-batch of empty completions only, and others with tokens
            assert any(empty) and not all(empty)
        if case == "mixed":  # empty rows among others in one micro-batch
            assert len(mbs) == 1 and 0 < int(mbs[0].completion_mask.any(dim=1).sum()) < 9
        if not kept:  # no token: no loss, and every gradient is zero
            assert all(empty) and loss == 0.0 and len(grads) >= 20
            assert all(torch.count_nonzero(g) == 0 for g in grads.values())
            continue
        assert abs(loss - want_loss) <= 1e-10, (chunk, loss, want_loss)
        assert grads.keys() == want.keys()
        for k, g in want.items():
            assert (grads[k] - g).abs().max() <= 1e-10, (chunk, k)
