"""An update that runs out of device memory is retried on smaller micro-batches, with the same result.

CPUs do not raise out-of-memory errors, so a forward pre-hook on the real policy's decoder (which
both log-prob paths run) raises ``torch.OutOfMemoryError`` (what CUDA raises) for forwards over more
than ``limit`` padded tokens;
the module, the Trainer and the update run for real, only the allocator's refusal is injected.
"""

import lightning as L
import pytest
import torch

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.data import PromptDataModule
from infgrpo.update.logprobs import causal_lm_parts
from tests.helpers import trainer as make_trainer

SETTINGS = dict(
    dtype="float64", group_size=4, sampler=SamplerConfig(num_slots=4, max_new_tokens=16), learning_rate=1e-3
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
    module = GRPOModule(**SETTINGS, **kw)
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
    with pytest.warns(UserWarning, match=r"update ran out of device memory with micro-batches of up to \d+ tokens"):
        module, rows = train(tmp_path / "oom", steps, limit=120, only_with_grad=only_with_grad, token_budget=4096, **kw)
    assert rows[0]["oom_retries"] >= 1 and rows[0]["token_budget"] <= 120
    assert rows[1]["oom_retries"] == 0  # the second step starts within the budget that fit
    assert module.updater.token_budget_cap <= 120
    ref_params = dict(reference.policy.named_parameters())
    for name, p in module.policy.named_parameters():
        assert torch.allclose(p, ref_params[name], atol=1e-10, rtol=0), name


def test_when_one_sequence_does_not_fit_the_error_says_what_to_lower(tmp_path):
    with pytest.warns(UserWarning), pytest.raises(torch.OutOfMemoryError, match="one sequence per micro-batch"):
        train(tmp_path, 1, limit=8, token_budget=4096)
