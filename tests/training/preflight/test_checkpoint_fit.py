"""A checkpoint that cannot resume this run is named before the model loads: one cut short (its size said), one whose
LoRA / 4-bit settings shape other weights than the command's (the checkpoint's values said)."""

import pytest
import torch

from infgrpo.settings import ConfigError, InfgrpoWarning
from infgrpo.training.hparams import check_settings
from infgrpo.training.preflight.checkpoints import check_checkpoint_path
from tests.test_fit import ROOT, cli_error


def checkpoint(path, **hparams):
    torch.save({"state_dict": {"w": torch.zeros(4096)}, "hyper_parameters": hparams}, path)
    return path


def test_a_checkpoint_cut_short_is_said_to_be_incomplete_with_its_size(tmp_path):
    whole = checkpoint(tmp_path / "whole.ckpt", lora={"r": 0})
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(whole.read_bytes()[:10_000])
    with pytest.raises(ConfigError, match=r"cut.ckpt' is incomplete: .* its end is missing \(10,000 bytes\)"):
        check_checkpoint_path(str(cut))
    (tmp_path / "notes.ckpt").write_text("hello")
    with pytest.raises(ConfigError, match=r"it is no torch.save archive \(5 bytes\)"):
        check_checkpoint_path(str(tmp_path / "notes.ckpt"))


def test_the_lora_settings_of_the_checkpoint_are_compared_with_the_runs(tmp_path):
    full = checkpoint(tmp_path / "full.ckpt", lora={"r": 0, "target_modules": "all-linear"})
    with pytest.raises(ConfigError, match=r"trained with lora.r=0 \(full fine-tuning\), and this run has model.lora.r=8"
                       r": .*\(--model.lora.r 0\)"):  # fmt: skip
        check_checkpoint_path(str(full), check_settings(lora={"r": 8}))
    with pytest.warns(InfgrpoWarning, match=r"lora.alpha=64 is ignored: lora.r is 0"):
        full_alpha = check_settings(lora={"r": 0, "alpha": 64})
    check_checkpoint_path(str(full), full_alpha)  # alpha shapes no weight
    qlora = checkpoint(tmp_path / "q.ckpt", lora={"r": 16}, quantization={"load_in_4bit": True})
    both = r"lora.r=16, quantization.load_in_4bit=True, and this run has model.lora.r=8, model.quantization"
    with pytest.raises(ConfigError, match=both):
        check_checkpoint_path(str(qlora), check_settings(lora={"r": 8}))
    old = checkpoint(tmp_path / "v01.ckpt", lora_r=4, loss_type="grpo")  # flat hyper-parameters of 0.1
    with pytest.raises(ConfigError, match=r"trained with lora.r=4"):
        check_checkpoint_path(str(old), check_settings())


def test_resuming_with_another_lora_rank_is_the_error_line(capsys, tmp_path):
    full = checkpoint(tmp_path / "full.ckpt", lora={"r": 0})
    args = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--model.lora.r", "8", "--ckpt_path", str(full)]
    assert "the checkpoint was trained with lora.r=0 (full fine-tuning)" in cli_error(capsys, *args)
