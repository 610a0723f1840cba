"""Hardware checks: a missing GPU fails before loading; bf16 on a CPU without it warns."""

import lightning as L
import pytest
import torch

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.data import PromptDataModule
from infgrpo.runtime.hardware import check_accelerator, cpu_flags, slow_cpu_dtype
from infgrpo.settings import InfgrpoWarning
from tests.test_fit import cli_error

X86 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\nmodel name\t: x\n"
SAPPHIRE = "flags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16 fphp\n"


def test_gpu_accelerator_without_a_gpu_names_the_cpu_option():
    with pytest.raises(
        ValueError, match=r"trainer.accelerator='gpu' but this machine has no GPU.*--trainer.accelerator cpu"
    ):
        check_accelerator("gpu", cuda_available=False)
    with pytest.raises(ValueError, match=r"no CUDA"):
        check_accelerator("cuda", cuda_available=False, mps_available=True)
    check_accelerator("gpu", cuda_available=True)
    check_accelerator("gpu", cuda_available=False, mps_available=True)
    for ok in ("cpu", "auto", None):
        check_accelerator(ok, cuda_available=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_fit_with_gpu_accelerator_fails_before_loading_the_model(capsys):
    # a model that does not exist: loading it first would fail with another error
    line = cli_error(
        capsys, "--config", "configs/smollm2.yaml", "--model.policy.model_name_or_path", "/nonexistent/model"
    )
    assert line.startswith("error: trainer.accelerator='gpu' but this machine has no GPU") and "accelerator cpu" in line


def test_cpu_flags_are_read_from_cpuinfo():
    assert cpu_flags(X86) == {"fpu", "sse2", "avx2", "fma"}
    assert "bf16" in cpu_flags(ARM)
    assert cpu_flags("nothing here") == set()


def test_bf16_warns_only_without_native_support():
    warning = slow_cpu_dtype("bfloat16", cpu_flags(X86))
    assert warning is not None and "--model.policy.dtype float32" in warning
    assert slow_cpu_dtype("bfloat16", cpu_flags(SAPPHIRE)) is None
    assert slow_cpu_dtype("bfloat16", cpu_flags(ARM)) is None
    assert slow_cpu_dtype("float32", cpu_flags(X86)) is None
    assert "float16" in slow_cpu_dtype("float16", cpu_flags(X86))


@pytest.mark.skipif(slow_cpu_dtype("bfloat16", cpu_flags()) is None, reason="this CPU has native bfloat16")
def test_a_bf16_cpu_run_warns_once_naming_float32(tmp_path):
    module = GRPOModule(
        policy={"dtype": "bfloat16"}, group_size=2, sampler=SamplerConfig(num_slots=2, max_new_tokens=4)
    )
    trainer = L.Trainer(
        max_steps=1, accelerator="cpu", default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, enable_checkpointing=False,
    )  # fmt: skip
    with pytest.warns(InfgrpoWarning, match=r"model.policy.dtype=bfloat16 on a CPU without native bfloat16") as record:
        trainer.fit(module, PromptDataModule(path="tiny", batch_size=2, eval_size=0))
    assert sum("native bfloat16" in str(w.message) for w in record) == 1
