"""token_budget: auto plans update micro-batches for update_memory; settings are checked before loading."""

import contextlib

import lightning as L
import pytest
import torch
from transformers import CohereConfig, CohereForCausalLM, Gemma2Config, Gemma2ForCausalLM

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.data import PromptDataModule
from infgrpo.runtime.memory import PhaseMemory
from infgrpo.settings import InfgrpoWarning
from infgrpo.update.budget import CPU_TOKEN_BUDGET, UpdateSizer, per_token_bytes, plan_token_budget, update_shape
from infgrpo.update.logprobs import causal_lm_parts, check_chunked_head
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
    sizer = UpdateSizer("auto", "7MB", chunk_tokens=64)  # holds fewer tokens than a CPU's cap: the memory decides
    first = sizer.tokens(model, 20)
    assert "token_budget" in capsys.readouterr().out and sizer.plan.cap is None  # the choice is logged
    sizer.observe(10**9, first)  # the process's first update: AdamW's state and the gradients, not per token
    assert sizer.measured_per_token is None and sizer.tokens(model, 20) == first
    sizer.observe(2 * sizer.plan.planned_bytes(first), first)  # twice the planned memory
    second = sizer.tokens(model, 20)
    assert second < first and sizer.plan.planned_bytes(first) > 7 * 10**6 >= sizer.plan.planned_bytes(second)
    assert "measured" in capsys.readouterr().out
    assert UpdateSizer(512, 0.5, 64).tokens(model, 200) == 512  # an integer is used as is
    resumed = UpdateSizer("auto", 0.9, chunk_tokens=64)  # a share of free memory: fixed by the first run, not now
    resumed.load_state_dict(sizer.state_dict())
    assert resumed.tokens(model, 20) == second and resumed.budget == 7 * 10**6  # the plan the run had reached


def test_the_issue_s_out_of_memory_peak_does_not_set_the_cost_and_a_measured_cost_never_fails(capsys):
    """A 12 GB card: 8 GB budget, sequences of 2,100 tokens; an update ran out of memory and its 9.5 GB peak
    over the one-sequence micro-batch that then fit (4.5 MB a token) made the next plan raise."""
    model = random_model("qwen3", vocab=5000)
    sizer = UpdateSizer("auto", "8GB", chunk_tokens=64)
    first = sizer.tokens(model, 2100)
    sizer.observe(int(3e9), first)  # first update
    sizer.observe(int(9.5e9), 2100, oom_retries=1)
    assert "not used to check the plan" in capsys.readouterr().out
    assert sizer.measured_per_token is None and sizer.tokens(model, 2100) == first  # trains on at the same plan
    sizer.observe(int(9.5e9), 2100)  # the same peak from an update without a retry: a real measurement
    measured = -(-(int(9.5e9) - sizer.plan.fixed_bytes) // 2100)
    assert sizer.measured_per_token == measured
    assert sizer.tokens(model, 2100) == first == CPU_TOKEN_BUDGET  # no ValueError (on a CPU: its cap)
    plan = plan_token_budget(8 * 10**9, update_shape(model), 2100, 64, per_token=measured)  # CUDA: no cap
    assert plan.token_budget == 2100 and plan.measured  # one sequence, not a ValueError
    assert "token_budget 2,100 = one sequence" in plan.describe()
    with pytest.raises(ValueError, match="too small for one sequence"):  # by the estimate it still raises
        plan_token_budget(10**6, update_shape(model), 2100, 64)


def test_auto_is_capped_on_a_cpu_and_the_cap_is_logged(capsys):
    model = random_model("qwen3", vocab=5000)
    assert UpdateSizer("auto", "1GB", chunk_tokens=64).tokens(model, 100) == CPU_TOKEN_BUDGET
    assert "the CPU cap" in capsys.readouterr().out
    plan = plan_token_budget(10**9, update_shape(model), 100, 64)  # what the memory holds: far more
    assert plan.token_budget > 10 * CPU_TOKEN_BUDGET and plan.cap is None
    long = UpdateSizer("auto", "1GB", chunk_tokens=64).tokens(model, 600)  # a longer sequence: alone in its own
    assert long == CPU_TOKEN_BUDGET
    small = UpdateSizer("auto", "5MB", chunk_tokens=64)  # memory below the cap: the memory sets it
    assert small.tokens(model, 20) < CPU_TOKEN_BUDGET and small.plan.cap is None


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


class DevicePeaks(PhaseMemory):
    """The update's peak rise as CUDA's allocator would report it (``max_memory_allocated`` minus its level at the
    start), on a CPU, for the policy the module really trains.

    A forward of the policy's decoder over n padded tokens allocates what the plan expects for n tokens; one over
    more than ``limit`` tokens with gradients fails as a full device does (``torch.OutOfMemoryError``, as
    ``tests/update/test_runner.py``'s hook), after filling the device: the peak is ``capacity``. What the update
    leaves allocated that was not there at its start counts too: the AdamW state the first optimizer step creates
    and the first gradients (their real bytes).
    """

    def __init__(self, module: GRPOModule, limit: float, capacity: int) -> None:
        super().__init__()
        self.module, self.limit, self.capacity, self.peak = module, limit, capacity, None
        decoder, _ = causal_lm_parts(module.policy)
        decoder.register_forward_pre_hook(self.allocate, with_kwargs=True)

    def held(self) -> int:
        opt = self.module.optimizers().optimizer
        state = sum(t.nbytes for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
        return state + sum(p.grad.nbytes for p in self.module.policy.parameters() if p.grad is not None)

    def allocate(self, decoder, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if self.peak is None or ids is None:
            return
        if ids.numel() > self.limit and torch.is_grad_enabled():
            self.peak = self.capacity
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {ids.numel()} tokens")
        self.peak = max(self.peak, self.module.updater.sizer.plan.planned_bytes(ids.numel()))

    def start(self, phase, device):
        super().start(phase, device)
        if phase == "update":
            self.peak, self.held_at_start = 0, self.held()

    def end(self, phase, device):
        super().end(phase, device)
        if phase == "update":
            self.start_allocated[phase], self.peak_allocated[phase] = 0, self.peak + self.held() - self.held_at_start
            self.peak = None


@pytest.mark.parametrize("limit", [40, float("inf")])
def test_a_step_after_an_update_out_of_memory_or_the_first_optimizer_state_trains_on_at_the_plan(tmp_path, limit):
    """token_budget auto, two steps; the first update runs out of memory once (limit 40) or not (inf), and allocates
    AdamW's state. Neither peak is a per-token cost: the second step trains at the plan (before: its tokens()
    raised "too small for one sequence" after the out-of-memory peak, and the optimizer state inflated the cost),
    and the second update, measured alone, is found within the plan."""
    module = GRPOModule(
        policy={"dtype": "float64"}, group_size=4, sampler=SamplerConfig(num_slots=4, max_new_tokens=16),
        optimizer={"learning_rate": 1e-3}, update={"token_budget": "auto", "update_memory": "30MB"},
    )  # fmt: skip
    module.phase_memory = DevicePeaks(module, limit, capacity=int(30e6 / 0.7))  # the budget: 0.7 of the device
    steps = Steps()
    ctx = pytest.warns(InfgrpoWarning, match="ran out of device memory") if limit == 40 else contextlib.nullcontext()
    with ctx:
        trainer(tmp_path, 2, enable_checkpointing=False, callbacks=[steps]).fit(
            module, PromptDataModule(path="tiny", batch_size=2, eval_split=None)
        )
    sizer = module.updater.sizer
    assert len(steps.rows) == 2 and (steps.rows[0][0] > 0) == (limit == 40) and steps.rows[1][0] == 0
    estimate = per_token_bytes(update_shape(module.policy), module.settings.update.logit_chunk_tokens)[0]
    assert sizer.measured_per_token == sizer.plan.per_token_bytes == estimate  # the estimate held: within the plan
    second_rise = module.phase_memory.peak_allocated["update"]
    assert 0 < second_rise <= sizer.plan.planned_bytes(int(steps.rows[1][1]))


class Steps(L.Callback):
    """(``update/oom_retries``, ``update/token_budget``) of every step."""

    def __init__(self):
        self.rows = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        m = trainer.callback_metrics
        self.rows.append((float(m["train/update/oom_retries"]), float(m["train/update/token_budget"])))
