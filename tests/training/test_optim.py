"""The learning-rate schedules against transformers' (TRL's ``lr_scheduler_type``), and in a Lightning run."""

from __future__ import annotations

import pytest
import torch
from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup

from infgrpo import GRPOModule
from infgrpo.data import PromptDataModule
from infgrpo.sampler import SamplerConfig
from infgrpo.training.optim import adamw_with_schedule, lr_factor
from tests.helpers import trainer

REFERENCE = {"linear": get_linear_schedule_with_warmup, "cosine": get_cosine_schedule_with_warmup}


def rates(sched: torch.optim.lr_scheduler.LRScheduler, opt: torch.optim.Optimizer, steps: int) -> list[float]:
    """The rate each of ``steps`` optimizer steps uses (read before the step, as the module logs it)."""
    out = []
    for _ in range(steps):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
@pytest.mark.parametrize("warmup", [0, 3])
def test_decay_equals_transformers_after_the_warmup(schedule, warmup):
    total = 17
    opt, sched = adamw_with_schedule([torch.nn.Parameter(torch.zeros(1))], 2e-4, 0.0, warmup, schedule, total)
    ref_opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=2e-4)
    ref = REFERENCE[schedule](ref_opt, num_warmup_steps=warmup, num_training_steps=total)
    ours, theirs = rates(sched, opt, total + 2), rates(ref, ref_opt, total + 2)
    assert ours[warmup : total + 1] == pytest.approx(theirs[warmup : total + 1], abs=1e-12)  # to 0 at step `total`
    assert ours[total:] == [0.0, 0.0]  # and 0 after it (transformers' cosine would rise again)
    assert ours[:warmup] == pytest.approx([2e-4 * (k + 1) / (warmup + 1) for k in range(warmup)])  # never 0
    assert ours[warmup] == 2e-4 and ours[total] == 0.0


def test_constant_keeps_the_rate_after_the_warmup():
    f = lr_factor("constant", 2, None)
    assert [f(k) for k in range(5)] == [1 / 3, 2 / 3, 1.0, 1.0, 1.0]


def test_bad_schedules_name_the_field():
    with pytest.raises(ValueError, match="lr_scheduler_type='cosine_with_restarts' must be one of constant, linear, c"):
        lr_factor("cosine_with_restarts", 0, 10)
    with pytest.raises(ValueError, match=r"lr_scheduler_type='linear' .* must exceed warmup_steps=0; got None"):
        lr_factor("linear", 0, None)
    with pytest.raises(ValueError, match="lr_scheduler_type='cosine_with_restarts'"):
        GRPOModule(optimizer={"lr_scheduler_type": "cosine_with_restarts"})  # before the model loads


SMALL = dict(group_size=4, sampler=SamplerConfig(num_slots=4, max_new_tokens=4))


def test_linear_decay_spans_max_steps(tmp_path):
    module = GRPOModule(**SMALL, optimizer={"learning_rate": 1e-3, "lr_scheduler_type": "linear"})
    t = trainer(tmp_path, 3)
    t.fit(module, PromptDataModule(path="tiny", batch_size=2, eval_split=None))
    # the last of 3 optimizer steps (k = 2) used (3 - 2) / 3 of the rate
    assert t.callback_metrics["train/lr"].item() == pytest.approx(1e-3 / 3)
    assert module.lr_schedulers().get_last_lr()[0] == 0.0  # decayed to 0 at the end of the run


def test_epochs_count_num_iterations_optimizer_steps(tmp_path):
    # one epoch of 2 batches, 2 optimizer steps each: 4 optimizer steps; batch 1 starts at step k = 2
    module = GRPOModule(
        **SMALL, optimizer={"learning_rate": 1e-3, "lr_scheduler_type": "linear"}, update={"num_iterations": 2}
    )
    t = trainer(tmp_path, -1, max_epochs=1, limit_train_batches=2)
    t.fit(module, PromptDataModule(path="tiny", batch_size=2, eval_split=None))
    assert t.global_step == 4
    assert t.callback_metrics["train/lr"].item() == pytest.approx(1e-3 * 2 / 4)
    assert module.lr_schedulers().get_last_lr()[0] == 0.0
