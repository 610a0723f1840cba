"""A LoRA checkpoint holds what trains and names its base (issue #60, item 3): the shipped tiny model with real peft
adapters, written the way Lightning writes a checkpoint and loaded back through ``GRPOModule.load_from_checkpoint``;
the base's fingerprint against a float64 recomputation of every frozen entry, and checkpoints written before this
(every weight, no ``infgrpo_base``) still load."""

import copy
import hashlib

import lightning as L
import pytest
import torch

from infgrpo import GRPOModule
from infgrpo.settings import ConfigError
from infgrpo.training.checkpoint_state import BASE_KEY, base_settings_mismatch, fingerprint, trimmed_for_sharding
from infgrpo.training.hparams import check_settings
from infgrpo.training.preflight.checkpoints import check_checkpoint_path
from tests.test_fit import ROOT, cli_error

LORA = {"lora": {"r": 8}, "group_size": 2}


@pytest.fixture(scope="module")
def trained():
    """tiny with LoRA r=8, its adapters moved off their start (B is 0 at the start), and a checkpoint of it as
    Lightning writes one (``state_dict``, ``hyper_parameters``) before the module's hook."""
    module = GRPOModule(**LORA)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.requires_grad:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(len(name)))
    full = {
        "state_dict": module.state_dict(),
        "hyper_parameters": dict(module.hparams),
        "pytorch-lightning_version": L.__version__,
    }
    return module, full


def test_a_lora_checkpoint_holds_the_adapters_and_names_its_base(trained, tmp_path):
    module, full = trained
    checkpoint = copy.copy(full)
    module.contents.write(checkpoint, module)
    kept = checkpoint["state_dict"]
    assert sum(v.numel() for v in full["state_dict"].values()) == 683_136  # the figure, every weight
    assert sum(v.numel() for v in kept.values()) == 65_536 and all("lora_" in k for k in kept)
    base = checkpoint[BASE_KEY]
    assert base["model_name_or_path"] == "tiny" and base["weights"] == "float32"
    frozen = {k: v for k, v in full["state_dict"].items() if k not in kept}
    digest = hashlib.sha256()  # the fingerprint's rule, recomputed here: names, dtypes, shapes and bytes, in order
    for name in sorted(frozen):
        digest.update(f"{name}|torch.float32|{tuple(frozen[name].shape)}\n".encode())
        digest.update(frozen[name].double().float().numpy().tobytes())  # float64 round trip: the same bytes
    assert base["fingerprint"] == digest.hexdigest() == fingerprint(frozen)
    torch.save(checkpoint, tmp_path / "lora.ckpt")
    torch.save(full, tmp_path / "before.ckpt")  # as infgrpo wrote LoRA checkpoints before: every weight, no base
    assert (tmp_path / "lora.ckpt").stat().st_size < (tmp_path / "before.ckpt").stat().st_size / 8
    want = module.state_dict()
    for name in ("lora.ckpt", "before.ckpt"):
        loaded = GRPOModule.load_from_checkpoint(tmp_path / name).state_dict()
        assert loaded.keys() == want.keys() and all(torch.equal(loaded[k], want[k]) for k in want), name


def test_a_lora_checkpoint_written_before_is_upgraded_to_the_adapters_and_its_base(trained, tmp_path, capsys):
    from infgrpo.upgrade_checkpoint import main as upgrade_main

    module, full = trained
    torch.save(full, tmp_path / "before.ckpt")  # every weight, no base: as LoRA checkpoints were written before
    upgrade_main([str(tmp_path / "before.ckpt"), str(tmp_path / "after.ckpt")])
    assert "the LoRA weights alone (65,536 of 683,136 values) and the base tiny named" in capsys.readouterr().out
    now = copy.copy(full)
    module.contents.write(now, module)  # what a run writes today
    after = torch.load(tmp_path / "after.ckpt", weights_only=True)
    assert after[BASE_KEY] == now[BASE_KEY] and after["state_dict"].keys() == now["state_dict"].keys()
    loaded = GRPOModule.load_from_checkpoint(tmp_path / "after.ckpt").state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in module.state_dict().items())


def test_another_base_is_one_line_naming_both(trained, tmp_path, capsys):
    module, full = trained
    checkpoint = copy.copy(full)
    module.contents.write(checkpoint, module)
    torch.save(checkpoint, tmp_path / "lora.ckpt")
    with pytest.raises(ConfigError) as err:  # the tool-calling tiny model: the same shapes, other weights
        GRPOModule.load_from_checkpoint(tmp_path / "lora.ckpt", policy={"model_name_or_path": "tiny-tools"})
    line = str(err.value)
    assert "\n" not in line and line.startswith("the checkpoint's LoRA weights were trained on the base tiny (float32")
    assert "and this run loads tiny-tools (float32; fingerprint" in line and "model_name_or_path tiny)" in line
    # the command line: the parser's one error line (exit 2), found once the other base loaded
    args = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--model.lora.r", "8", "--model.group_size", "2"]
    args += ["--model.policy.model_name_or_path", "tiny-tools", "--trainer.default_root_dir", str(tmp_path / "run")]
    assert cli_error(capsys, *args, "--ckpt_path", str(tmp_path / "lora.ckpt")) == f"error: {line}"
    # held in another dtype: said before the model loads, with the settings that differ
    state = check_checkpoint_path(str(tmp_path / "lora.ckpt"), check_settings(**LORA))
    assert state[BASE_KEY]["weights"] == "float32"
    with pytest.raises(ConfigError, match=r"lora.ckpt': the checkpoint's LoRA weights were trained on tiny held as "
                       r"float32, and this run holds its base as float64: resume with"):  # fmt: skip
        check_checkpoint_path(str(tmp_path / "lora.ckpt"), check_settings(**LORA, policy={"dtype": "float64"}))
    q = check_settings(lora={"r": 8}, quantization={"load_in_4bit": True})
    assert "held as float32, and this run holds its base as 4-bit nf4 (double quantization), bfloat16" in (
        base_settings_mismatch(state[BASE_KEY], q.policy, q.quantization)
    )
    assert "trainer.strategy 'fsdp2' reads a checkpoint's whole model state" in trimmed_for_sharding(state)
    assert trimmed_for_sharding(full) is None


def test_full_fine_tuning_keeps_every_weight():
    module = GRPOModule(group_size=2)
    checkpoint = {"state_dict": module.state_dict()}
    module.contents.write(checkpoint, module)
    assert BASE_KEY not in checkpoint and checkpoint["state_dict"].keys() == module.state_dict().keys()


@pytest.mark.slow  # two fits
def test_a_4bit_lora_run_resumes_from_its_adapter_checkpoint_exactly(tmp_path):
    """2 uninterrupted steps equal step 2 resumed from the checkpoint of step 1 (the adapters alone), bit for bit, on a
    4-bit base with LoRA dropout (its random state resumes too)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from infgrpo.data import PromptDataModule
    from tests.helpers import trainer

    settings = dict(
        lora={"r": 4, "dropout": 0.1}, quantization={"load_in_4bit": True, "bnb_4bit_compute_dtype": "float32"},
        group_size=2, sampler={"num_slots": 4, "max_new_tokens": 8}, optimizer={"learning_rate": 1e-2}, threads=1,
    )  # fmt: skip

    def run(steps, callbacks=(), ckpt=None):
        L.seed_everything(0)
        module = GRPOModule(**settings)
        t = trainer(tmp_path, steps, callbacks=list(callbacks), enable_checkpointing=bool(callbacks))
        t.fit(module, PromptDataModule(path="tiny", batch_size=2, eval_split=None), ckpt_path=ckpt)
        return module

    every = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1)
    straight = run(2, [every])
    step1 = tmp_path / "epoch=0-step=1.ckpt"
    saved = torch.load(step1, weights_only=True)
    assert saved[BASE_KEY]["weights"] == "4-bit nf4 (double quantization), float32 compute"
    assert all("lora_" in k for k in saved["state_dict"]) and len(saved["state_dict"]) == 56  # A, B x 7 x 4 layers
    resumed = run(2, ckpt=step1)
    want, got = straight.state_dict(), resumed.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
