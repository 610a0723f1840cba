"""Rows whose samples decoded different prompts (environments' observations) through the real update.

Row 0's three samples decoded two prompts (samples 0 and 2 shared one), row 1's one. The reference is TRL 1.16's own
``_compute_loss`` (``tests.algo.trl_reference``) on the whole batch at once, each completion after its own prompt
(nothing shared), in float64; ours packs by ``Rollouts.prompt_table``: the shared-prompt path runs each distinct
prompt of a row once (a row of two prompts is two shared prompts), under a budget that splits it into micro-batches.
"""

import pytest
import torch

from infgrpo.algo import Objective
from infgrpo.sampler import Rollouts
from infgrpo.update import collate, completion_logprobs
from infgrpo.update.config import UpdateConfig
from infgrpo.update.runner import PolicyUpdate
from tests.algo.trl_reference import TRLLoss
from tests.helpers import float64_norms, random_model

PAD, MAX_LEN = 0, 8
ROW_PROMPTS = [[1, 5, 7, 9], [3, 4, 6]]
OTHER = [1, 5, 7, 9, 11, 12]  # row 0's second observation: a longer prompt
ENTRY_PROMPTS = [ROW_PROMPTS[0], OTHER, ROW_PROMPTS[0], ROW_PROMPTS[1], ROW_PROMPTS[1], ROW_PROMPTS[1]]
COMPLETIONS = [[20, 21, 2], [22, 2], [23, 24, 25, 2], [30, 2], [31, 32, 2], [33, 34, 35, 36]]
ADVANTAGES = [1.0, -0.5, -0.5, 0.7, -1.1, 0.4]


def test_prompt_table_names_each_distinct_prompt_of_a_row_once():
    rolls = Rollouts(ROW_PROMPTS, 3, COMPLETIONS, [torch.zeros(len(c)) for c in COMPLETIONS], ["stop"] * 6)
    assert rolls.prompt_table() == (ROW_PROMPTS, [0, 0, 0, 1, 1, 1])
    rolls.entry_prompts = ENTRY_PROMPTS
    assert rolls.prompt_table() == ([ROW_PROMPTS[0], OTHER, ROW_PROMPTS[1]], [0, 1, 0, 2, 2, 2])


@pytest.mark.parametrize("budget,share", [(24, True), (10_000, False)])
def test_the_update_of_rows_with_several_prompts_equals_the_unshared_float64_loss_and_gradient(budget, share):
    obj = Objective(beta=0.04)
    model = float64_norms(random_model("qwen3", torch.float64)).train()
    ref_model = float64_norms(random_model("qwen3", torch.float64, seed=1)).eval()
    # the reference: every completion after its own prompt, the whole batch in one TRL loss
    mb = collate(list(range(6)), ENTRY_PROMPTS, COMPLETIONS, pad_id=PAD)
    logp, ent = completion_logprobs(model, mb, 1.0, 0, entropy=True, entropy_grad=True)
    with torch.no_grad():
        ref = completion_logprobs(ref_model, mb, 1.0, 0)  # (6, C)
    mask = mb.completion_mask.double()
    behaviour = (logp.detach() + 0.03).float().double() * mask
    model.zero_grad(set_to_none=True)
    loss = TRLLoss(obj, MAX_LEN)(logp, ent, torch.tensor(ADVANTAGES, dtype=torch.float64), mask, mask.sum().item(),
                                 ref=ref, sampling=behaviour)  # fmt: skip
    loss.backward()
    want = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    rolls = Rollouts(ROW_PROMPTS, 3, COMPLETIONS, [behaviour[i, : len(c)].float() for i, c in enumerate(COMPLETIONS)],
                     ["stop", "stop", "stop", "stop", "stop", "length"], entry_prompts=ENTRY_PROMPTS)  # fmt: skip
    got = {}
    config = UpdateConfig(token_budget=budget, skip_zero_advantage="off")
    update = PolicyUpdate(config, obj, max_completion_length=MAX_LEN, share_prompt=share)
    result = update.run(
        model, rolls, torch.tensor(ADVANTAGES, dtype=torch.float64), lambda x: x.backward(),
        lambda: got.update({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}),
        lambda: model.zero_grad(), ref_model=ref_model,
    )  # fmt: skip
    if share:
        assert result.stats["micro_batches"] >= 2
    assert result.stats["loss"] == pytest.approx(loss.item(), rel=1e-10, abs=1e-14)
    assert want.keys() == got.keys() and any(g.abs().max() > 0 for g in want.values())
    for k, g in want.items():
        assert (got[k] - g).abs().max() <= 1e-10 * max(g.abs().max().item(), 1.0), k
