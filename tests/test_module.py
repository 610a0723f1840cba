import inspect
import math
from pathlib import Path

import lightning as L
import pytest
import torch

from infgrpo import GRPOModule, OptimizerConfig, SamplerConfig
from infgrpo.algo import Objective
from infgrpo.data import PromptDataModule
from infgrpo.rewards import RewardError
from infgrpo.settings import InfgrpoWarning
from infgrpo.update import LossConfig
from tests.helpers import ALLOW_02_REWARDS, ALLOW_SKIP_OFF, merged, save_base, trainer

SMALL = dict(
    group_size=4, sampler=SamplerConfig(num_slots=4, max_new_tokens=24), optimizer=OptimizerConfig(learning_rate=1e-3)
)


def data(**kw):
    return PromptDataModule(path="tiny", batch_size=2, eval_size=8, **kw)


def boom(completions, metadata):
    raise KeyError("answer")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(group_size=1), "group_size=1 must be an integer >= 2"),
        (
            dict(objective={"loss_type": "ppo"}),
            "objective.loss_type='ppo' is not known; valid: grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo",
        ),
        (dict(objective={"advantage": "rloo"}), "objective.advantage='rloo' is not known; valid: grpo"),
        (dict(objective={"scale_rewards": "std"}), "objective.scale_rewards='std' is not known"),
        (dict(objective={"kl_estimator": "k9"}), "objective.kl_estimator='k9' is not known"),
        (
            dict(rewards={"functions": {"gsm9k": 1.0}, "accuracy": None}),
            "rewards.functions: 'gsm9k' is not known",
        ),
        (dict(rewards={"accuracy": "format"}), "rewards.accuracy='format' must be one of functions: synthetic"),
        (dict(update={"num_iterations": 0}), "update.num_iterations=0 must be >= 1"),
        (dict(policy={"dtype": "float8"}), "policy.dtype='float8' is not known"),
    ],
)
def test_bad_config_is_rejected_before_loading(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GRPOModule(**kwargs)


@ALLOW_SKIP_OFF
def test_reference_policy_is_loaded_only_when_needed():
    assert GRPOModule(objective={"beta": 0.0}).ref_model is None
    full = GRPOModule(objective={"beta": 0.04})
    assert full.ref_model is not None and not any(p.requires_grad for p in full.ref_model.parameters())
    assert "ref" not in " ".join(full.state_dict())  # the reference is not checkpointed
    lora = GRPOModule(objective={"beta": 0.04}, lora={"r": 4})
    assert lora.ref_model is None and hasattr(lora.policy, "disable_adapter")


def test_training_steps_update_the_policy_and_log_metrics(tmp_path):
    module = GRPOModule(**SMALL)
    before = {k: v.clone() for k, v in module.policy.state_dict().items()}
    t = trainer(tmp_path, 3)
    t.fit(module, data())
    assert t.global_step == 3
    changed = [k for k, v in module.policy.state_dict().items() if not torch.equal(v, before[k])]
    assert changed
    m = t.callback_metrics
    for key in (
        "train/reward",
        "train/accuracy",
        "train/completion_length",
        "train/frac_reward_zero_std",
        "train/clip_ratio",
        "train/kl",
        "time/rollout_s",
        "time/update_s",
        "rollout/bubble_fraction",
        "rollout/steps_over_lower_bound",
        "rollout/length_mae",
        "rollout/length_spearman",
        "rollout/length_within_20pct",
        "rollout/num_slots",
        "rollout/oom_retries",
    ):
        assert any(k.endswith(key) for k in m), key
    assert m["train/rollout/steps_over_lower_bound"] >= 1.0


def test_logged_learning_rate_is_the_one_the_step_used(tmp_path):
    # linear warmup over 3 steps: optimizer steps 0, 1 use 1/4 and 2/4 of the rate
    module = GRPOModule(**merged(SMALL, sampler={"max_new_tokens": 4}, optimizer={"warmup_steps": 3}))
    t = trainer(tmp_path, 2)
    t.fit(module, data())
    assert t.callback_metrics["train/lr"].item() == pytest.approx(1e-3 * 2 / 4)


@ALLOW_02_REWARDS
@pytest.mark.parametrize("mask", [False, True])
def test_mask_truncated_completions_leaves_cut_completions_out_of_the_loss(tmp_path, tokenizer, mask):

    # a random model: diverse completions that never stop within 4 tokens, so every one is cut
    base = save_base("qwen3", tokenizer, tmp_path / "base")
    module = GRPOModule(
        policy={"model_name_or_path": base},
        **merged(SMALL, sampler={"max_new_tokens": 4}),
        rewards={"functions": {f"{__name__}:parity": 1.0}, "accuracy": None},
        objective={"mask_truncated_completions": mask},
    )
    before = {k: v.clone() for k, v in module.policy.state_dict().items()}
    t = trainer(tmp_path, 1)
    t.fit(module, PromptDataModule(path="tiny", tokenizer=base, batch_size=2, eval_split=None))
    assert t.callback_metrics["train/completions_truncated"] == 1.0
    assert t.callback_metrics["train/frac_reward_zero_std"] < 1.0  # there is something to learn
    changed = any(not torch.equal(v, before[k]) for k, v in module.policy.state_dict().items())
    assert changed != mask  # masked: zero loss, zero gradients, AdamW (no decay) leaves the weights


def parity(completions, metadata):
    import zlib

    return [float(zlib.crc32(c.encode()) % 2) for c in completions]


@ALLOW_SKIP_OFF
def test_num_iterations_takes_several_optimizer_steps_per_rollout(tmp_path):
    module = GRPOModule(**SMALL, update={"num_iterations": 2}, objective={"beta": 0.04, "epsilon_high": 0.28})
    t = trainer(tmp_path, 4)
    t.fit(module, data())
    assert t.global_step == 4 and module.sampler.calls == 2


@ALLOW_02_REWARDS
def test_reward_that_raises_stops_with_the_function_name(tmp_path):
    module = GRPOModule(**SMALL, rewards={"functions": {f"{__name__}:boom": 1.0}, "accuracy": None})
    with pytest.raises(RewardError, match=r"reward 'tests.test_module:boom' raised KeyError"):
        trainer(tmp_path, 1).fit(module, data())


def synthetic_or_inf(completions, prompts, answer, **kwargs):
    """The synthetic reward, failing (inf) on every second completion."""
    from infgrpo.rewards.synthetic import synthetic_reward

    scores = synthetic_reward(completions, prompts, answer)
    return [math.inf if i % 2 else s for i, s in enumerate(scores)]


def synthetic_or_none(completions, prompts, answer, **kwargs):
    """The synthetic reward, not applying (None) to every second completion."""
    from infgrpo.rewards.synthetic import synthetic_reward

    scores = synthetic_reward(completions, prompts, answer)
    return [None if i % 2 else s for i, s in enumerate(scores)]


@pytest.mark.parametrize("mode", ["skip", "zero"])
def test_failed_rewards_are_counted_warned_and_training_goes_on(tmp_path, mode):
    name = f"{__name__}:synthetic_or_inf"
    module = GRPOModule(**SMALL, rewards={"functions": {name: 1.0}, "accuracy": name, "on_error": mode})
    t = trainer(tmp_path, 1)
    with pytest.warns(
        InfgrpoWarning, match=rf"returned inf for \d+ of \d+ completions: rewards.on_error={mode}|no reward"
    ):
        t.fit(module, data())
    m = t.callback_metrics
    assert m["train/rewards_failed"].item() == 4  # half of 2 prompts x 4 completions
    assert torch.isfinite(m["train/reward"]) and torch.isfinite(m["train/accuracy"])


def test_none_rewards_need_no_setting_and_are_no_failure(tmp_path):
    name = f"{__name__}:synthetic_or_none"
    module = GRPOModule(**SMALL, rewards={"functions": {name: 1.0}, "accuracy": name})
    t = trainer(tmp_path, 1)
    with pytest.warns(InfgrpoWarning, match=r"no reward for \d+ of \d+ completions"):  # the rows none applies to
        t.fit(module, data())
    m = t.callback_metrics
    assert m["train/rewards_failed"].item() == 0
    assert torch.isfinite(m["train/reward"]) and torch.isfinite(m["train/accuracy"])


def test_prompt_longer_than_context_is_a_clear_error(tmp_path):
    module = GRPOModule(group_size=2, sampler=SamplerConfig(max_new_tokens=250))
    with pytest.raises(ValueError, match=r"max_new_tokens=250 it needs .* \(max_position_embeddings\) is 256"):
        trainer(tmp_path, 1).fit(module, data())


@pytest.mark.parametrize("extra", [{}, {"lora": {"r": 4, "dropout": 0.3}}], ids=["full", "lora-dropout"])
def test_resume_from_checkpoint_is_exact(tmp_path, extra):
    """2 + 2 steps with a checkpoint in between equal 4 uninterrupted steps, bit for bit (dropout too)."""
    L.seed_everything(0)
    straight = GRPOModule(**SMALL, **extra)
    trainer(tmp_path / "a", 4).fit(straight, data())

    L.seed_everything(0)
    first = GRPOModule(**SMALL, **extra)
    t = trainer(tmp_path / "b", 2)
    t.fit(first, data())
    ckpt = tmp_path / "b" / "mid.ckpt"
    t.save_checkpoint(ckpt)

    L.seed_everything(123)  # resuming must not depend on the global seed
    resumed = GRPOModule(**SMALL, **extra)
    t2 = trainer(tmp_path / "c", 4)
    t2.fit(resumed, data(), ckpt_path=ckpt)
    assert resumed.sampler.calls == 4
    for (k, a), b in zip(straight.policy.state_dict().items(), resumed.policy.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    # the length predictor resumed too: same statistics, same history, same predictions
    want, got = straight.sampler.predictor, resumed.sampler.predictor
    assert want.rows == got.rows == pytest.approx(sum(0.9**i * 2 for i in range(4)))
    assert torch.equal(want.A, got.A) and torch.equal(want.b, got.b) and want.history == got.history
    keys = list(want.history)
    assert want.predict(keys) == got.predict(keys)


class SeenPrompts(L.Callback):
    """The (Lightning epoch, prompts) of every training batch."""

    def __init__(self):
        self.seen = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.seen.append((trainer.current_epoch, tuple(b["meta"]["prompt"] for b in batch)))


@pytest.mark.slow  # over 20 s on a busy 2-core machine
def test_resume_from_an_end_of_epoch_checkpoint_continues_with_the_next_epoch(tmp_path):
    # 6 prompts, 3 a step: 2 steps an epoch; ModelCheckpoint saves at each epoch's end
    import json

    from lightning.pytorch.callbacks import ModelCheckpoint

    rows = [{"prompt": f"rev {chr(97 + i)}{chr(98 + i)}"} for i in range(6)]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = merged(SMALL, sampler={"max_new_tokens": 4})

    def run(root, steps, ckpt=None):
        seen = SeenPrompts()
        t = trainer(root, steps, callbacks=[ModelCheckpoint(dirpath=root, save_top_k=-1), seen])
        t.fit(
            GRPOModule(**settings),
            PromptDataModule(path=str(tmp_path / "data"), batch_size=3, eval_split=None),
            ckpt_path=ckpt,
        )
        return [prompts for _, prompts in seen.seen]

    straight = run(tmp_path / "a", 5)
    assert len({p for b in straight[2:4] for p in b}) == 6  # epoch 1 visits every prompt once
    assert straight[2:4] != straight[:2]  # in another order than epoch 0's
    run(tmp_path / "b", 2)  # stops at the end of epoch 0 and its checkpoint
    resumed = run(tmp_path / "c", 5, ckpt=str(tmp_path / "b" / "epoch=0-step=2.ckpt"))
    # Lightning counts the first resumed batch in epoch 0 and starts its epoch 1 after it; the data
    # order must not follow that: epoch 1's two batches, then epoch 2's first
    assert resumed == straight[2:]


@ALLOW_SKIP_OFF
def test_kl_bias_correction_is_on_by_default_as_in_trl_1_16():
    # one default for the module and the update's LossConfig (they used to disagree: True vs False)
    assert inspect.signature(GRPOModule).parameters["objective"].default.kl_bias_correction is True
    assert Objective().kl_bias_correction is True and LossConfig().objective.kl_bias_correction is True
    lora = {"r": 4}
    assert GRPOModule(objective={"beta": 0.04}, lora=lora).updater.loss.objective.kl_bias_correction is True
    module = GRPOModule(objective={"beta": 0.04, "kl_bias_correction": False}, lora=lora)
    assert module.updater.loss.objective.kl_bias_correction is False


def test_relative_output_dir_goes_under_the_runs_root(tmp_path, monkeypatch, capsys):
    from infgrpo.policy.load import resolve_output_dir

    assert resolve_output_dir("/abs/adapter", "runs/a") == Path("/abs/adapter")
    assert resolve_output_dir("adapter", "runs/a") == Path("runs/a/adapter")
    monkeypatch.chdir(tmp_path)  # the working directory must not receive it
    root = tmp_path / "run"
    module = GRPOModule(**SMALL, lora={"r": 4}, output_dir="adapter")
    trainer(root, 1).fit(module, data())
    assert (root / "adapter" / "adapter_config.json").exists()
    assert not (tmp_path / "adapter").exists()
    assert f"wrote the trained adapter to {root / 'adapter'}" in capsys.readouterr().out
