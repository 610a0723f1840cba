"""PolicyUpdate: the same update for any micro-batching, and retried on smaller micro-batches out of memory.

The out-of-memory tests drive the whole module through a Trainer;

CPUs do not raise out-of-memory errors, so a forward pre-hook on the real policy's decoder (which
both log-prob paths run) raises ``torch.OutOfMemoryError`` (what CUDA raises) for forwards over more
than ``limit`` padded tokens;
the module, the Trainer and the update run for real, only the allocator's refusal is injected.
"""

import lightning as L
import pytest
import torch

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.algo import Objective
from infgrpo.data import PromptDataModule
from infgrpo.policy.load import load_policy
from infgrpo.sampler import Rollouts
from infgrpo.settings import InfgrpoWarning
from infgrpo.update.config import UpdateConfig
from infgrpo.update.logprobs import causal_lm_parts
from infgrpo.update.runner import PolicyUpdate
from tests.helpers import float64_norms, random_model, save_base
from tests.helpers import trainer as make_trainer

SETTINGS = dict(
    policy={"dtype": "float64"},
    group_size=4,
    sampler=SamplerConfig(num_slots=4, max_new_tokens=16),
    optimizer={"learning_rate": 1e-3},
)


def token_limit(model, limit, only_with_grad):
    """Makes ``model`` fail like a full GPU on forwards over more than ``limit`` padded tokens."""

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.numel() > limit and (torch.is_grad_enabled() or not only_with_grad):
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {ids.numel()} tokens")

    decoder, _ = causal_lm_parts(model)
    return decoder.register_forward_pre_hook(hook, with_kwargs=True)


class Logged(L.Callback):
    """Keeps ``train/update/*`` of every step."""

    def __init__(self):
        self.rows = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        m = trainer.callback_metrics
        self.rows.append({k: float(m[f"train/update/{k}"]) for k in ("oom_retries", "token_budget")})


def train(tmp_path, steps, limit=None, only_with_grad=True, **kw):
    module = GRPOModule(**SETTINGS, update=kw)
    float64_norms(module.policy)  # float64 throughout: micro-batchings then agree to ~1e-15, not float32 rounding
    if limit is not None:
        token_limit(module.policy, limit, only_with_grad)
    logged = Logged()
    trainer = make_trainer(tmp_path, steps, enable_checkpointing=False, callbacks=[logged])
    trainer.fit(module, PromptDataModule(path="tiny", batch_size=2, eval_split=None))
    return module, logged.rows


@pytest.mark.parametrize("only_with_grad,kw", [(True, {}), (False, {"num_iterations": 2})])
def test_update_retries_on_smaller_microbatches_and_trains_identically(tmp_path, only_with_grad, kw):
    # only_with_grad: the backward pass's forward fails (the micro-batches are split in halves);
    # otherwise already the frozen old log-probs of num_iterations=2 fail (the rollout is repacked)
    steps = 2 * kw.get("num_iterations", 1)  # two rollouts
    reference, _ = train(tmp_path / "ref", steps, token_budget=4096, **kw)
    with pytest.warns(InfgrpoWarning, match=r"update ran out of device memory with micro-batches of up to \d+ tokens"):
        module, rows = train(tmp_path / "oom", steps, limit=40, only_with_grad=only_with_grad, token_budget=4096, **kw)
    # a micro-batch's budget counts its prompt and completion forwards together, the limit each forward alone
    assert rows[0]["oom_retries"] >= 1 and rows[0]["token_budget"] <= 2 * 40
    assert rows[1]["oom_retries"] == 0  # the second step starts within the budget that fit
    assert module.updater.token_budget_cap <= 2 * 40
    ref_params = dict(reference.policy.named_parameters())
    for name, p in module.policy.named_parameters():
        assert torch.allclose(p, ref_params[name], atol=1e-10, rtol=0), (
            name,
            (p - ref_params[name]).abs().max().item(),
        )


def test_when_one_sequence_does_not_fit_the_error_says_what_to_lower(tmp_path):
    with pytest.warns(InfgrpoWarning), pytest.raises(torch.OutOfMemoryError, match="one sequence per micro-batch"):
        train(tmp_path, 1, limit=8, token_budget=4096)


# -- PolicyUpdate on its own: no Trainer, no LightningModule ------------------------------------


def hand_rollouts(seed=0, prompts=3, group=4, reasons=None):
    """Random prompts and completions (ragged), G per prompt, as the sampler would return them."""
    g = torch.Generator().manual_seed(seed)
    prompt_ids = [torch.randint(3, 100, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist()
                  for _ in range(prompts)]  # fmt: skip
    comps = [torch.randint(3, 100, (int(torch.randint(1, 12, (1,), generator=g)),), generator=g).tolist()
             for _ in range(prompts * group)]  # fmt: skip
    reasons = reasons or ["stop"] * len(comps)
    return Rollouts(prompt_ids, group, comps, [torch.zeros(len(c)) for c in comps], reasons)


def run_update(model, rollouts, advantages, token_budget, ref=None, mask_truncated_completions=False, **kw):
    """One PolicyUpdate with plain SGD; returns the result and the parameters after it."""
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    objective = Objective(beta=0.04 if ref is not None else 0.0, mask_truncated_completions=mask_truncated_completions)
    update = UpdateConfig(token_budget=token_budget, skip_zero_advantage="off", **kw)
    updater = PolicyUpdate(update, objective, max_completion_length=12)
    result = updater.run(model, rollouts, advantages, lambda x: x.backward(), opt.step, opt.zero_grad, ref)
    return result, {k: v.detach().clone() for k, v in model.named_parameters()}


@pytest.mark.parametrize("kw", [{}, {"num_iterations": 2}], ids=["mu1", "mu2"])
def test_the_update_is_the_same_for_any_token_budget_float64(kw):
    # 12 completions in one micro-batch vs many: the same optimizer steps, to float64 rounding
    rollouts = hand_rollouts()
    adv = torch.randn(len(rollouts), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ref = random_model("qwen3", torch.float64, seed=7)  # a frozen reference: beta > 0
    one, after_one = run_update(random_model("qwen3", torch.float64).train(), rollouts, adv, 4096, ref, **kw)
    many, after_many = run_update(random_model("qwen3", torch.float64).train(), rollouts, adv, 24, ref, **kw)
    assert one.stats["micro_batches"] == 1 and many.stats["micro_batches"] > 3
    assert (one.token_budget, many.token_budget, one.oom_retries) == (4096, 24, 0)
    assert many.largest_microbatch <= 24 or many.stats["micro_batches"] == len(rollouts)
    assert one.stats["loss"] == pytest.approx(many.stats["loss"], abs=1e-12)
    moved = max(
        (after_one[k] - v).abs().max().item() for k, v in random_model("qwen3", torch.float64).named_parameters()
    )
    assert moved > 1e-4  # the update did something
    for k, v in after_one.items():
        assert torch.allclose(v, after_many[k], atol=1e-10, rtol=0), k


def test_truncated_completions_are_masked_out_of_the_loss_when_asked():
    rollouts = hand_rollouts(reasons=["length"] * 12)
    adv = torch.randn(12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    before = {k: v.clone() for k, v in random_model("qwen3", torch.float64).named_parameters()}
    _, masked = run_update(
        random_model("qwen3", torch.float64).train(), rollouts, adv, 64, mask_truncated_completions=True
    )
    _, kept = run_update(random_model("qwen3", torch.float64).train(), rollouts, adv, 64)
    assert all(torch.equal(masked[k], v) for k, v in before.items())  # every completion cut: zero gradient
    assert any(not torch.equal(kept[k], v) for k, v in before.items())


def update_gradients(policy, rollouts, advantages):
    """The gradients one PolicyUpdate leaves before its optimizer step (which here only copies them)."""
    grads = {}

    def keep() -> None:
        grads.update({k: p.grad.clone() for k, p in policy.named_parameters() if p.grad is not None})

    updater = PolicyUpdate(UpdateConfig(token_budget=40, skip_zero_advantage="off"), max_completion_length=12)
    updater.run(policy.train(), rollouts, advantages, lambda x: x.backward(), keep, lambda: policy.zero_grad())
    return grads


def test_gradient_checkpointing_gives_the_same_float64_gradients(tokenizer, tmp_path):
    base = save_base("qwen3", tokenizer, tmp_path / "base")
    rollouts, grads = hand_rollouts(), []
    adv = torch.randn(len(rollouts), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for checkpointing in (False, True):
        torch.manual_seed(0)  # the same LoRA initialization
        policy = load_policy(base, "float64", lora_r=4, gradient_checkpointing=checkpointing)
        with torch.no_grad():  # B nonzero, so A gets gradients too
            for name, p in policy.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.linspace(-0.1, 0.1, p.numel(), dtype=p.dtype).view_as(p))
        assert policy.base_model.model.is_gradient_checkpointing == checkpointing
        grads.append(update_gradients(policy, rollouts, adv))
    assert len(grads[0]) == len(grads[1]) > 0 and any(g.abs().max() > 0 for g in grads[0].values())
    for name, g in grads[0].items():
        assert torch.allclose(g, grads[1][name], atol=1e-10, rtol=0), name
