"""Multi-turn rollouts (tools) through the real update: tool-result tokens are read, never trained on.

Each completion below holds tool-result tokens (ids >= 60, tool mask 0) between the model's turns, which end
on EOS (2). The reference is TRL 1.16's own ``_compute_loss`` with ``inputs["tool_mask"]``
(``tests.algo.trl_reference``), fed the same float64 model's log-probs and entropies for the whole batch at once;
our update runs on several micro-batches, prompts shared or not. The behaviour log-probs of tool tokens are
placeholders: ours hold a value no log-prob has (3.0), TRL's 0.0, so any read of them would show.
"""

import pytest
import torch

from infgrpo.algo import Objective
from infgrpo.sampler import Rollouts
from infgrpo.update import collate, completion_logprobs
from infgrpo.update.config import UpdateConfig
from infgrpo.update.runner import PolicyUpdate
from infgrpo.update.step import split_microbatches
from tests.algo.trl_reference import TRLLoss, reference_importance_sampling_ratio
from tests.helpers import ALLOW_OBJECTIVE_WARNINGS, float64_norms, random_model

EOS, PAD, MAX_LEN, PLACEHOLDER = 2, 0, 12, 3.0
PROMPTS = [[1, 5, 7, 9], [3, 4], [8, 9, 10, 11, 12]]
COMPLETIONS = [
    [20, 21, 2, 60, 61, 62, 23, 24, 2],  # one tool round
    [30, 31, 32, 33, 2],  # no tool call
    [40, 2, 63, 64, 41, 42, 2, 65, 66, 43, 2],  # two rounds
    [42, 2],
    [50, 51, 2, 67, 68, 69],  # cut at max_new_tokens right after a tool result (no model token after it)
    [52, 53, 54, 2, 70, 55, 2],
]
TOOL_MASKS = [[0 if t >= 60 else 1 for t in c] for c in COMPLETIONS]
FINISH = ["stop", "stop", "stop", "stop", "length", "stop"]
ADVANTAGES = [1.0, -1.0, 0.5, -0.5, -1.2, 1.2]


def rollouts(finish=FINISH, tool_masks=TOOL_MASKS):
    """The multi-turn rollout, 2 completions a prompt; behaviour log-probs set by the test."""
    logprobs = [torch.zeros(len(c)) for c in COMPLETIONS]
    return Rollouts(PROMPTS, 2, COMPLETIONS, logprobs, list(finish), tool_masks=tool_masks)


def right_padded(rows, width, value):
    """(n, width) float64 of ``rows`` right-padded with ``value``."""
    return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=torch.float64)


def trl_truncated():
    """TRL's ``is_truncated``: the last completion id is neither an EOS nor the pad id."""
    return torch.tensor([c[-1] not in (EOS, PAD) for c in COMPLETIONS])


def batch_logprobs(model):
    """The whole batch's log-probs and entropies (6, C) with the gradient, its completion mask and tool mask."""
    mb = collate(list(range(6)), [PROMPTS[i // 2] for i in range(6)], COMPLETIONS, pad_id=PAD)
    logp, ent = completion_logprobs(model, mb, 1.0, 0, entropy=True, entropy_grad=True)
    mask = mb.completion_mask.double()
    return logp, ent, mask, right_padded(TOOL_MASKS, mask.shape[1], 1)  # TRL pads the tool mask with 1


def update_gradients(model, rolls, advantages, obj, budget, share, ref_model, skip="off"):
    """The gradients one PolicyUpdate leaves, and its result."""
    grads = {}

    def keep():
        grads.update({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})

    updater = PolicyUpdate(
        UpdateConfig(token_budget=budget, skip_zero_advantage=skip), obj, max_completion_length=MAX_LEN,
        share_prompt=share,
    )  # fmt: skip
    result = updater.run(
        model.train(), rolls, advantages, lambda x: x.backward(), keep, lambda: model.zero_grad(), ref_model=ref_model
    )
    return grads, result


CASES = {
    "grpo": Objective(),
    "grpo-kl": Objective(beta=0.04),
    "dapo-kl": Objective(loss_type="dapo", beta=0.04),
    "dr_grpo-kl": Objective(loss_type="dr_grpo", beta=0.04),
    "bnpo-kl": Objective(loss_type="bnpo", beta=0.04),
    "gspo-entropy-mask-bonus": Objective(
        importance_sampling_level="sequence", top_entropy_quantile=0.4, entropy_coef=0.01
    ),
    "off-policy-token-mask-correction": Objective(
        off_policy_mask_threshold=0.02,
        rollout_correction="token_mask",
        rollout_correction_clip_min=0.95,
        rollout_correction_clip_max=1.05,
    ),
    "dapo-kl-mask-truncated": Objective(loss_type="dapo", beta=0.04, mask_truncated_completions=True),
}


@ALLOW_OBJECTIVE_WARNINGS
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("budget,share", [(10_000, False), (24, False), (40, True)])
def test_the_update_with_a_tool_mask_equals_trls_loss_and_gradient_float64(case, budget, share):
    obj = CASES[case]
    model = float64_norms(random_model("qwen3", torch.float64)).train()
    ref_model = float64_norms(random_model("qwen3", torch.float64, seed=1)).eval()
    logp, ent, mask, tool = batch_logprobs(model)
    with torch.no_grad():
        ref = batch_logprobs(ref_model)[0]
    noise = torch.randn(logp.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 0.05
    # TRL's sampling log-probs: 0.0 on tool tokens; float32 values, as a rollout stores them
    behaviour = ((logp.detach() + noise) * mask * tool).float().double()
    rolls = rollouts()
    rolls.logprobs = [
        torch.where(tool[i, : len(c)].bool(), behaviour[i, : len(c)], PLACEHOLDER).float()
        for i, c in enumerate(COMPLETIONS)
    ]
    adv = torch.tensor(ADVANTAGES, dtype=torch.float64)
    # TRL: the whole batch in one call, truncated rows masked as its _generate_and_score_completions does
    if obj.mask_truncated_completions:
        kept = (~trl_truncated()).double()[:, None]
        mask, tool = mask * kept, tool * kept
    ratio = None
    if obj.rollout_correction != "none":
        ratio = reference_importance_sampling_ratio(
            logp.detach(), behaviour, mask * tool, obj.rollout_correction, obj.rollout_correction_clip_min,
            obj.rollout_correction_clip_max,
        )  # fmt: skip
    trl = TRLLoss(obj, MAX_LEN)
    model.zero_grad(set_to_none=True)
    loss = trl(
        logp, ent, adv, mask, (mask * tool).sum().item(), ref=ref if obj.beta else None, sampling=behaviour,
        importance_sampling_ratio=ratio, tool_mask=tool,
    )  # fmt: skip
    loss.backward()
    want = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    # ours: several micro-batches, shared prompts or not
    got, result = update_gradients(model, rolls, adv, obj, budget, share, ref_model)
    if budget < 10_000:
        assert result.stats["micro_batches"] >= 2
    assert result.stats["loss"] == pytest.approx(loss.item(), rel=1e-10, abs=1e-14)
    for name in ("kl", "entropy"):  # TRL's metrics: means over the model's tokens
        if trl.metrics.get(name):
            assert result.stats[name] == pytest.approx(trl.metrics[name][-1], rel=1e-10, abs=1e-14), name
    assert want.keys() == got.keys() and any(g.abs().max() > 0 for g in want.values())
    for k, g in want.items():
        assert (got[k] - g).abs().max() <= 1e-10 * max(g.abs().max().item(), 1.0), k


def test_skipping_zero_advantage_rows_counts_only_model_tokens():
    obj = Objective()
    model = float64_norms(random_model("llama", torch.float64)).train()
    logp, ent, mask, tool = batch_logprobs(model)
    adv = torch.tensor([1.0, 0.0, 0.5, 0.0, -1.2, 1.2], dtype=torch.float64)  # two rows left out of the forward
    loss = TRLLoss(obj, MAX_LEN)(logp, ent, adv, mask, (mask * tool).sum().item(), tool_mask=tool)
    model.zero_grad(set_to_none=True)
    loss.backward()
    want = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    got, result = update_gradients(model, rollouts(), adv, obj, 10_000, False, None, skip="on")
    assert result.rows_skipped == 2
    for k, g in want.items():
        assert (got[k] - g).abs().max() <= 1e-10 * max(g.abs().max().item(), 1.0), k


def loss_mask(row, width):
    """Row ``row``'s expected loss mask, ``width`` columns: its tool mask, then padding."""
    return TOOL_MASKS[row] + [0] * (width - len(TOOL_MASKS[row]))


@pytest.mark.parametrize("share", [False, True])
def test_tool_tokens_stay_in_the_inputs_and_out_of_the_loss_through_every_split(share):
    rolls = rollouts()
    updater = PolicyUpdate(UpdateConfig(token_budget=10_000), max_completion_length=MAX_LEN, share_prompt=share)
    mbs = updater.pack(rolls, 10_000)
    assert len(mbs) == 1
    mb = mbs[0]
    for r, row in enumerate(mb.rows):  # the model reads every completion token, tool results included
        n = len(COMPLETIONS[row])
        assert mb.completion_ids[r, :n].tolist() == COMPLETIONS[row] and mb.generated[r, :n].all()
        assert mb.completion_mask[r].tolist() == loss_mask(row, mb.completion_ids.shape[1])
    if not share:
        assert mb.attention_mask.sum().item() == sum(len(PROMPTS[i // 2]) + len(c) for i, c in enumerate(COMPLETIONS))
    for _ in range(3):  # out of memory: halves, their halves, ... carry each row's mask
        mbs = split_microbatches(mbs)
    assert sorted(row for mb in mbs for row in mb.rows) == list(range(6)) and all(len(mb.rows) == 1 for mb in mbs)
    for mb in mbs:
        row = mb.rows[0]
        assert mb.completion_mask[0].tolist() == loss_mask(row, mb.completion_ids.shape[1])


def test_the_rollouts_lengths_and_truncation_follow_trls_rules():
    model_tokens = [sum(1 for t in c if t < 60) for c in COMPLETIONS]
    assert rollouts().model_lengths == model_tokens  # TRL's completions/*_length: sum(tool_mask)
    # TRL's is_truncated (last id not EOS/pad), whatever reason the engine gave a completion ending in a tool result
    for reason in ("length", "stop"):
        rolls = rollouts(finish=FINISH[:4] + [reason] + FINISH[5:])
        assert rolls.truncated == trl_truncated().tolist() == [False, False, False, False, True, False]
    single = rollouts(finish=["stop", "length", "stop", "stop", "stop", "stop"], tool_masks=None)
    assert single.model_lengths == single.lengths and single.truncated == [False, True, False, False, False, False]
    updater = PolicyUpdate(UpdateConfig(), Objective(mask_truncated_completions=True), max_completion_length=MAX_LEN)
    assert updater.batch_counts(rollouts()) == (6, sum(model_tokens) - model_tokens[4])
    assert PolicyUpdate(max_completion_length=MAX_LEN).batch_counts(rollouts()) == (6, sum(model_tokens))
