"""A run that diverges stops with one DivergenceError naming what went non-finite, the step, the likely setting and
the last good checkpoint: through ``python -m infgrpo.fit``'s ``main`` and a Python Trainer, on the tiny model."""

import math
import os
import warnings
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from infgrpo import GRPOModule, OptimizerConfig, SamplerConfig
from infgrpo.data import PromptDataModule
from infgrpo.fit import main
from infgrpo.sampler.engine.finite import NonFiniteLogitsError
from infgrpo.settings import ConfigError, InfgrpoWarning
from infgrpo.training.divergence import (
    DivergenceError,
    check_update,
    first_non_finite,
    float32_norm,
    last_checkpoint,
    likely_settings,
)
from infgrpo.training.hparams import check_settings
from tests.helpers import trainer
from tests.test_fit import QUICK, ROOT

SMALL = dict(
    group_size=2, sampler=SamplerConfig(num_slots=4, max_new_tokens=12), optimizer=OptimizerConfig(learning_rate=1e-3)
)


def data() -> PromptDataModule:
    return PromptDataModule(path="tiny", batch_size=2, eval_size=8)


# -- the pure helpers ----------------------------------------------------------------------------
def test_first_non_finite_is_the_first_in_order():
    assert first_non_finite({"loss": 0.5, "gradient norm": 1.0}) is None
    assert first_non_finite({"loss": 0.5, "gradient norm": math.nan, "parameter norm": math.inf}) == "gradient norm"
    assert first_non_finite({"loss": -math.inf, "gradient norm": math.nan}) == "loss"


def test_float32_norm_overflows_for_huge_weights_but_not_for_a_float16_model():
    halves = [torch.full((4,), 60000.0, dtype=torch.float16), torch.ones(3, dtype=torch.float16)]
    assert float32_norm(halves).item() == pytest.approx(math.sqrt(4 * 60000.0**2 + 3))  # past float16's 65504
    assert float32_norm([torch.ones(2, 2), torch.full((3,), 2.0)]).item() == pytest.approx(4.0)
    assert math.isinf(float32_norm([torch.full((10,), 1e30)]).item())  # finite weights, a norm past float32
    assert math.isnan(float32_norm([torch.ones(2), torch.tensor([math.nan])]).item())
    assert float32_norm([]).item() == 0.0
    mixed = float32_norm([torch.full((2,), 3.0, dtype=torch.float64), torch.full((1,), 4.0, dtype=torch.bfloat16)])
    assert mixed.dtype == torch.float32 and mixed.item() == pytest.approx(math.sqrt(34))  # float64 is not narrowed


def test_full_fine_tuning_of_float16_weights_is_refused_before_loading_and_lora_over_them_is_not():
    with pytest.raises(ConfigError, match=r"^policy.dtype='float16' with lora.r=0 \(full fine-tuning\) cannot train: "):
        check_settings(policy={"dtype": "float16"})
    assert check_settings(policy={"dtype": "float16"}, lora={"r": 8}).policy.dtype == "float16"


def test_likely_settings_put_float16_first_and_the_rate_only_after_an_update():
    keys = lambda s, updates: [k for k, _ in likely_settings(s, updates)]  # noqa: E731
    base = check_settings()
    assert keys(base, 0) == []
    assert keys(base, 3) == ["model.optimizer.learning_rate"]
    half = check_settings(policy={"dtype": "float16"}, lora={"r": 8}, optimizer={"max_grad_norm": 0.0})
    assert keys(half, 0) == ["model.policy.dtype"]
    assert keys(half, 1) == ["model.policy.dtype", "model.optimizer.learning_rate", "model.optimizer.max_grad_norm"]
    advice = dict(likely_settings(check_settings(optimizer={"learning_rate": 10.0}), 1))
    assert advice["model.optimizer.learning_rate"].startswith("model.optimizer.learning_rate=10 is too high")


def test_last_checkpoint_is_the_newest_file_the_run_has(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    old, new = folder / "step=1.ckpt", folder / "last.ckpt"
    old.write_text("x")
    new.write_text("y")
    os.utime(old, (1, 1))
    callback = SimpleNamespace(last_model_path="", best_model_path=str(old), dirpath=str(folder))
    assert last_checkpoint(SimpleNamespace(checkpoint_callbacks=[callback], ckpt_path=None)) == str(new)
    resumed = SimpleNamespace(checkpoint_callbacks=[], ckpt_path=str(old))
    assert last_checkpoint(resumed) == str(old)  # the checkpoint a run resumed from
    gone = SimpleNamespace(last_model_path=str(tmp_path / "deleted.ckpt"), best_model_path="", dirpath=None)
    assert last_checkpoint(SimpleNamespace(checkpoint_callbacks=[gone], ckpt_path=None)) is None


def test_check_update_names_the_loss_before_the_norms(tmp_path):
    model = torch.nn.Linear(3, 2)
    model.weight.grad = torch.full_like(model.weight, math.nan)
    run = SimpleNamespace(global_step=4, checkpoint_callbacks=[], ckpt_path=None)
    settings = check_settings(optimizer={"learning_rate": 5e-2})
    loss = r"^training diverged at step 4: the loss is nan\. Likely: model\.optimizer\.learning_rate=0\.05 is too high"
    with pytest.raises(DivergenceError, match=loss):
        check_update(math.nan, model, settings, run)
    with pytest.raises(DivergenceError, match="the gradient norm is nan") as caught:
        check_update(0.1, model, settings, run)
    assert caught.value.what == "gradient norm" and caught.value.step == 4 and caught.value.checkpoint is None
    model.weight.grad = None
    with torch.no_grad():
        model.bias[1] = math.inf
    with pytest.raises(DivergenceError, match=r"the parameter norm is inf in float32 \(non-finite values in bias\)"):
        check_update(0.1, model, settings, run)
    with torch.no_grad():
        model.bias[1] = 0.0
    check_update(0.1, model, settings, run)  # finite: nothing


# -- real runs ---------------------------------------------------------------------------------------
def test_learning_rate_1e30_stops_the_fit_at_step_1_naming_the_learning_rate(tmp_path):
    args = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--trainer.default_root_dir", str(tmp_path), *QUICK]
    with pytest.raises(DivergenceError) as caught:
        main([*args, "--trainer.max_steps", "5", "--model.optimizer.learning_rate", "1e30"])
    err = caught.value
    assert (err.what, err.step, err.settings) == ("parameter norm", 1, ["model.optimizer.learning_rate"])
    assert str(err).startswith("training diverged at step 1: the parameter norm is inf in float32 (largest |weight|")
    assert "model.optimizer.learning_rate=1e+30 is too high" in str(err)
    assert "No checkpoint was written before it" in str(err)


class RaiseRate(L.Callback):
    """Sets the learning rate to ``rate`` before step ``step`` (from 1): a run that diverges after good steps."""

    def __init__(self, step: int, rate: float) -> None:
        self.step, self.rate = step, rate

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step - 1:
            scheduler = pl_module.lr_schedulers()
            scheduler.base_lrs = [self.rate for _ in scheduler.base_lrs]
            for group in pl_module.optimizers().param_groups:
                group["lr"] = self.rate


def test_a_run_that_diverges_later_names_its_last_good_checkpoint(tmp_path):
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_last=True, save_top_k=-1)
    t = trainer(tmp_path, 5, callbacks=[checkpoints, RaiseRate(2, 1e30)])
    module = GRPOModule(**SMALL)
    with pytest.raises(DivergenceError, match="^training diverged at step 2: the parameter norm is inf") as caught:
        t.fit(module, data())
    err = caught.value
    assert err.step == 2 and err.checkpoint is not None and Path(err.checkpoint).is_file()
    assert f"Last good checkpoint: {err.checkpoint}" in str(err)
    state = torch.load(err.checkpoint, map_location="cpu", weights_only=False)
    assert state["global_step"] == 1  # written before the step that diverged
    assert all(torch.isfinite(v).all() for v in state["state_dict"].values() if v.is_floating_point())


def test_a_float16_policy_with_non_finite_logits_stops_with_the_samplers_error_and_the_dtype(tmp_path):
    half = {"policy": {"model_name_or_path": "tiny", "dtype": "float16"}, "lora": {"r": 8}}  # full: refused
    module = GRPOModule(**{**SMALL, **half})
    with torch.no_grad():
        module.policy.get_base_model().model.layers[0].mlp.down_proj.weight[0, 0] = math.inf  # they overflowed
    first = "^training diverged in the first rollout: non-finite logits at the prefill"
    with pytest.raises(DivergenceError, match=first) as e, warnings.catch_warnings():
        # a CPU without native float16 also gets fit start's "slower than float32" warning: not what this tests
        warnings.filterwarnings("ignore", "\\[infgrpo\\] model.policy.dtype=float16 on a CPU without", InfgrpoWarning)
        trainer(tmp_path, 2).fit(module, data())
    assert isinstance(e.value.__cause__, NonFiniteLogitsError)  # the sampler's, never an index error
    assert e.value.what == "logits" and e.value.settings == ["model.policy.dtype"]  # no update ran: not the rate
    assert "model.policy.dtype=float16 overflows past 65504" in str(e.value)
