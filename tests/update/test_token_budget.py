"""token_budget: auto plans update micro-batches for update_memory; settings are checked before loading."""

import lightning as L
import pytest
import torch
from transformers import CohereConfig, CohereForCausalLM, Gemma2Config, Gemma2ForCausalLM

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.data import PromptDataModule
from infgrpo.update.budget import UpdateSizer, per_token_bytes, plan_token_budget, update_shape
from infgrpo.update.logprobs import check_chunked_head
from tests.helpers import random_model, trainer

SMALL = dict(vocab_size=103, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(update={"token_budget": "big"}), "token_budget='big'; valid: an integer >= 1 .* or 'auto'"),
        (dict(update={"token_budget": 0}), "token_budget=0; valid"),
        (dict(update={"token_budget": "auto", "update_memory": "lots"}), "update_memory='lots' is not understood"),
        (dict(update={"token_budget": "auto", "update_memory": 1.5}), "update_memory=1.5 is out of range"),
        (
            dict(update={"logit_chunk_tokens": -1}),
            "logit_chunk_tokens=-1 must be an integer >= 1 .* or 0 \\(full logits\\)",
        ),
    ],
)
def test_update_memory_settings_are_rejected_with_the_field_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GRPOModule(**kwargs)


def test_models_whose_logits_are_not_the_head_of_the_hidden_states_are_refused():
    torch.manual_seed(0)
    gemma = Gemma2ForCausalLM(Gemma2Config(**SMALL, num_key_value_heads=1, head_dim=16, final_logit_softcapping=30.0))
    with pytest.raises(ValueError, match="logit_chunk_tokens=1024: .* sets final_logit_softcapping=30.0.*: 0 to"):
        check_chunked_head(gemma, 1024)
    check_chunked_head(gemma, 0)  # full logits: the model's own forward
    cohere = CohereForCausalLM(CohereConfig(**SMALL, num_key_value_heads=1, logit_scale=0.25))
    with pytest.raises(ValueError, match="sets logit_scale=0.25"):
        check_chunked_head(cohere, 1024)
    cohere.config.logit_scale = 1.0  # the config hides it, the forward still scales: the numeric check sees it
    with pytest.raises(ValueError, match="logits are not its LM head applied to its final hidden states"):
        check_chunked_head(cohere, 1024)
    check_chunked_head(random_model("qwen3"), 1024)  # Qwen3 and Llama pass


def test_plan_is_the_most_tokens_within_the_budget():
    shape = update_shape(random_model("qwen3", vocab=5000))
    per_token, fixed = per_token_bytes(shape, 64)
    assert fixed == 3 * 64 * 5000 * 4 and per_token > 0
    plan = plan_token_budget(10**8, shape, 200, 64)
    assert plan.planned_bytes(plan.token_budget) <= 10**8 < plan.planned_bytes(plan.token_budget + 1)
    full_per_token, full_fixed = per_token_bytes(shape, 0)
    assert full_fixed == 0 and full_per_token == per_token + 5000 * (4 + 16)  # full logits cost per token
    with pytest.raises(ValueError, match="update_memory gives 1,000,000 bytes .* too small for one sequence of 200"):
        plan_token_budget(10**6, shape, 200, 64)


def test_a_measured_peak_above_the_plan_lowers_later_budgets(capsys):
    model = random_model("qwen3", vocab=5000)
    sizer = UpdateSizer("auto", "100MB", chunk_tokens=64)
    first = sizer.tokens(model, 200)
    assert "token_budget" in capsys.readouterr().out  # the choice is logged
    sizer.observe(2 * sizer.plan.planned_bytes(first), first)  # twice the planned memory
    second = sizer.tokens(model, 200)
    assert second < first and sizer.plan.planned_bytes(first) > 10**8 >= sizer.plan.planned_bytes(second)
    assert "measured" in capsys.readouterr().out
    assert UpdateSizer(512, 0.5, 64).tokens(model, 200) == 512  # an integer is used as is
    resumed = UpdateSizer("auto", 0.9, chunk_tokens=64)  # a share of free memory: fixed by the first run, not now
    resumed.load_state_dict(sizer.state_dict())
    assert resumed.tokens(model, 200) == second and resumed.budget == 10**8  # the plan the run had reached


class Logged(L.Callback):
    def __init__(self):
        self.budgets = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.budgets.append(int(trainer.callback_metrics["train/update/token_budget"]))


def test_auto_token_budget_packs_the_update_within_the_plan(tmp_path):
    module = GRPOModule(
        group_size=4,
        sampler=SamplerConfig(num_slots=4, max_new_tokens=16),
        update={"token_budget": "auto", "update_memory": "30MB", "logit_chunk_tokens": 64},
    )
    logged = Logged()
    trainer(tmp_path, 2, enable_checkpointing=False, callbacks=[logged]).fit(
        module, PromptDataModule(path="tiny", batch_size=2, eval_split=None)
    )
    plan = module.updater.sizer.plan
    assert plan is not None and plan.budget_bytes == 30 * 10**6
    assert logged.budgets[-1] == plan.token_budget and plan.planned_bytes(plan.token_budget) <= 30 * 10**6
    rollout, update = module.phase_memory.windows["rollout"], module.phase_memory.windows["update"]
    assert rollout[0] <= rollout[1] <= update[0] <= update[1]  # the rollout, then the update
    assert module.phase_memory.metrics() == {}  # peaks are CUDA's; nothing is invented on CPU
