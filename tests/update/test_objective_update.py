"""The objective's options through the real update: TRL 1.16's loss and gradient on the model, any micro-batching.

Each case runs :class:`PolicyUpdate` on a float64 model (several micro-batches, prompts shared or not)
and compares the gradient with TRL's own ``_compute_loss`` (``tests.algo.trl_reference``) fed the same
model's log-probs and entropies for the whole batch at once.
"""

import inspect
import math
import warnings

import pytest
import torch

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.algo import Objective
from infgrpo.sampler import Rollouts
from infgrpo.settings import InfgrpoWarning
from infgrpo.training.hparams import check_settings
from infgrpo.update import collate, completion_logprobs
from infgrpo.update.config import UpdateConfig
from infgrpo.update.runner import PolicyUpdate
from tests.algo.trl_reference import TRLLoss, reference_importance_sampling_ratio
from tests.helpers import ALLOW_OBJECTIVE_WARNINGS, ALLOW_SKIP_OFF, float64_norms, random_model

PROMPTS = [[1, 5, 7, 9], [3, 4], [8, 9, 10, 11, 12]]
COMPLETIONS = [[20, 21, 22], [30, 31, 32, 33, 34, 35], [40, 41], [42], [50, 51], [52, 53, 54, 55]]
MAX_LEN = 8


def rollouts(shift=0.05):
    """2 completions a prompt; behaviour log-probs filled in by the test (the policy's plus a perturbation)."""
    return Rollouts(PROMPTS, 2, COMPLETIONS, [torch.zeros(len(c)) for c in COMPLETIONS], ["stop"] * 6)


def policy_logprobs(model, entropy=True):
    """The whole batch's log-probs and entropies (6, C) from the full logits, with the gradient, and the mask."""
    mb = collate(list(range(6)), [PROMPTS[i // 2] for i in range(6)], COMPLETIONS, pad_id=0)
    logp, ent = completion_logprobs(model, mb, 1.0, 0, entropy=True, entropy_grad=True)
    return logp, ent, mb.completion_mask.double()


def ours(model, rolls, advantages, obj, budget, share):
    """Gradients one PolicyUpdate leaves (mu = 1), and its statistics."""
    grads = {}

    def keep():
        grads.update({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})

    update = UpdateConfig(token_budget=budget, skip_zero_advantage="off")
    updater = PolicyUpdate(update, obj, max_completion_length=MAX_LEN, share_prompt=share)
    result = updater.run(model.train(), rolls, advantages, lambda x: x.backward(), keep, lambda: model.zero_grad())
    return grads, result


CASES = {
    "gspo": Objective(importance_sampling_level="sequence"),
    "cispo": Objective(loss_type="cispo", epsilon_high=5.0),
    "sapo": Objective(loss_type="sapo"),
    "vespo-token-truncate": Objective(loss_type="vespo", rollout_correction="token_truncate"),
    "dapo-entropy-mask-bonus": Objective(loss_type="dapo", top_entropy_quantile=0.4, entropy_coef=0.01),
    "grpo-off-policy-sequence-mask": Objective(
        off_policy_mask_threshold=0.02, rollout_correction="sequence_mask", rollout_correction_clip_max=1.2
    ),
    "luspo-delta-kl-free": Objective(loss_type="luspo", importance_sampling_level="sequence", delta=1.5),
}


@ALLOW_OBJECTIVE_WARNINGS
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("budget,share", [(10_000, False), (24, False), (24, True)])
def test_the_update_equals_trls_loss_and_gradient_on_the_model_float64(case, budget, share):
    obj = CASES[case]
    model = float64_norms(random_model("qwen3", torch.float64)).train()
    logp, ent, mask = policy_logprobs(model)
    noise = torch.randn(logp.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 0.05
    behaviour = (logp.detach() + noise) * mask
    rolls = rollouts()
    rolls.logprobs = [behaviour[i, : len(c)].float() for i, c in enumerate(COMPLETIONS)]
    behaviour = torch.stack(
        [torch.nn.functional.pad(lp.double(), (0, logp.shape[1] - len(lp))) for lp in rolls.logprobs]
    )
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, -1.2, 1.2], dtype=torch.float64)
    # TRL: the whole batch in one call
    trl = TRLLoss(obj, MAX_LEN)
    ratio = None
    if obj.rollout_correction != "none":
        ratio = reference_importance_sampling_ratio(
            logp.detach(), behaviour, mask, obj.rollout_correction, obj.rollout_correction_clip_min,
            obj.rollout_correction_clip_max,
        )  # fmt: skip
    model.zero_grad(set_to_none=True)
    loss = trl(logp, ent, adv, mask, mask.sum().item(), sampling=behaviour, importance_sampling_ratio=ratio)
    loss.backward()
    want = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    # ours: several micro-batches, shared prompts or not
    got, result = ours(model, rolls, adv, obj, budget, share)
    if budget == 24:
        assert result.stats["micro_batches"] >= 2
    assert result.stats["loss"] == pytest.approx(loss.item(), abs=1e-12)
    assert want.keys() == got.keys() and any(g.abs().max() > 0 for g in want.values())
    for k, g in want.items():
        assert (got[k] - g).abs().max() <= 1e-10, k


def test_entropy_and_the_rollout_mismatch_are_measured_every_step():
    model = float64_norms(random_model("llama", torch.float64)).train()
    logp, ent, mask = policy_logprobs(model)
    rolls = rollouts()
    rolls.logprobs = [(logp[i, : len(c)].detach() + 0.1).float() for i, c in enumerate(COMPLETIONS)]  # 0.1 above
    _, result = ours(model, rolls, torch.ones(6, dtype=torch.float64), Objective(), 24, True)
    st = result.stats
    assert st["entropy"] == pytest.approx(((ent * mask).sum() / mask.sum()).item(), abs=1e-10)
    assert st["rollout/logprob_mismatch_mean"] == pytest.approx(0.1, abs=1e-6)
    assert st["rollout/logprob_mismatch_max"] == pytest.approx(0.1, abs=1e-6)
    assert st["rollout/ratio_mean"] == pytest.approx(math.exp(-0.1), abs=1e-6)
    assert st["kl"] == 0.0 and st["entropy_coef"] == 0.0


@ALLOW_SKIP_OFF
def test_the_adaptive_entropy_coefficient_moves_per_step_and_is_checkpointed():
    obj = dict(entropy_coef=0.1, use_adaptive_entropy=True, entropy_target=100.0, entropy_coef_delta=0.02)
    model = random_model("qwen3", torch.float64).train()
    rolls = rollouts()
    update = UpdateConfig(num_iterations=2, token_budget=4096, skip_zero_advantage="off")
    updater = PolicyUpdate(update, Objective(**obj), max_completion_length=MAX_LEN)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    result = updater.run(
        model, rolls, torch.ones(6, dtype=torch.float64), lambda x: x.backward(), opt.step, opt.zero_grad
    )
    # entropy (a few nats) is below the target: two optimizer steps move the coefficient up twice
    assert updater.entropy_coef.coef == pytest.approx(0.14) and result.stats["entropy_coef"] == pytest.approx(0.14)
    assert result.stats["entropy_coef_applied"] == pytest.approx(0.12)  # the last step used the first move
    module = GRPOModule(group_size=2, objective=obj)
    module.updater.entropy_coef.coef, module.updater.entropy_coef.last_entropy = 0.3, 1.5
    checkpoint = {}
    module.on_save_checkpoint(checkpoint)
    resumed = GRPOModule(group_size=2, objective=obj)
    resumed.on_load_checkpoint(checkpoint)
    assert (resumed.updater.entropy_coef.coef, resumed.updater.entropy_coef.last_entropy) == (0.3, 1.5)


def test_combinations_trl_refuses_are_refused_before_loading():
    with pytest.raises(ValueError, match="rollout_correction='sequence_mask' cannot be used with loss_type='vespo'"):
        GRPOModule(
            policy={"model_name_or_path": "no/such-model"},
            objective={"loss_type": "vespo", "rollout_correction": "sequence_mask"},
        )
    with pytest.raises(ValueError, match="importance_sampling_level='tokens' is not known; valid: token, sequence"):
        GRPOModule(policy={"model_name_or_path": "no/such-model"}, objective={"importance_sampling_level": "tokens"})
    with pytest.raises(ValueError, match=r"top_entropy_quantile=1.5 must be in \[0, 1\]"):
        GRPOModule(policy={"model_name_or_path": "no/such-model"}, objective={"top_entropy_quantile": 1.5})


def test_the_modules_objective_defaults_are_the_objectives():
    params = inspect.signature(GRPOModule.__init__).parameters
    assert params["objective"].default == Objective()  # one default for every objective setting
    assert GRPOModule(objective=None).settings.objective == Objective()


def test_hf_cb_with_truncation_warns_that_corrections_see_filtered_logprobs():
    truncated = SamplerConfig(decoder="hf_cb", top_k=20)
    with pytest.warns(InfgrpoWarning, match="its behaviour log-probs are taken after the filtering"):
        check_settings(sampler=truncated, objective={"rollout_correction": "token_truncate"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning without a correction, or without truncation, or with the engine
        check_settings(sampler=truncated)
        check_settings(sampler=SamplerConfig(decoder="hf_cb"), objective={"rollout_correction": "token_truncate"})
        check_settings(sampler=SamplerConfig(top_k=20), objective={"off_policy_mask_threshold": 0.1})
