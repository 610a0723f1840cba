"""Helpers shared by the tests: tiny random models, a saved base folder, 4-bit + LoRA policies, a quiet Trainer."""

import os
import signal
import subprocess
import sys
import zlib
from pathlib import Path

import lightning as L
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3ForSequenceClassification,
)

from infgrpo.policy.load import load_policy

ALLOW_OBJECTIVE_WARNINGS = pytest.mark.filterwarnings(
    r"ignore:\[infgrpo\] (loss_type|importance_sampling_level|delta)=:infgrpo.settings.InfgrpoWarning"
)
"""For tests that build, on purpose, the combinations ``Objective`` accepts with a warning (as TRL does): ignores
those warnings, and only those (a test that wants one asserts it with ``pytest.warns``)."""
ALLOW_SKIP_OFF = pytest.mark.filterwarnings(
    r"ignore:\[infgrpo\] update\.skip_zero_advantage. off, because:infgrpo.settings.InfgrpoWarning"
)
"""For tests whose objective (a KL term, an entropy bonus) turns ``update.skip_zero_advantage: auto`` off, which it
says once with a warning."""
ALLOW_02_REWARDS = pytest.mark.filterwarnings("ignore::infgrpo.settings.InfgrpoFutureWarning")
"""For tests whose rewards are written in infgrpo 0.2's ``fn(completions, metadata, **info)``, served with a warning
until 0.4 (tests/rewards/test_trl_rewards.py asserts the warning)."""


def random_model(
    arch: str, dtype: torch.dtype = torch.float32, vocab: int = 103, seed: int = 0, num_labels: int = 0, **config
):
    """A freshly initialized tiny model of the given architecture (eos id 2, pad id 0); ``config`` overrides.

    A causal LM, or with ``num_labels`` a sequence classifier with that many labels (one: a reward model).
    """
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=2,
        pad_token_id=0,
    )
    common.update(config)
    if num_labels:
        common["num_labels"] = num_labels
    if arch == "qwen3":
        cls = Qwen3ForSequenceClassification if num_labels else Qwen3ForCausalLM
        model = cls(Qwen3Config(**{"head_dim": 16, **common}))
    else:
        model = (LlamaForSequenceClassification if num_labels else LlamaForCausalLM)(LlamaConfig(**common))
    return model.to(dtype).eval()


def with_lora(model: torch.nn.Module, targets: list[str]) -> torch.nn.Module:
    """``model`` with rank-4 LoRA on ``targets``, B nonzero (seeded by its name, in every process alike)."""
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets, task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1, generator=torch.Generator().manual_seed(zlib.crc32(name.encode())))
    return model.train()


def save_base(arch, tokenizer, folder):
    random_model(arch, torch.float32, vocab=len(tokenizer), seed=3).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def trained_4bit_lora(arch, tokenizer, folder, bnb_4bit_compute_dtype="float32"):
    """(4-bit policy with a LoRA r=4 adapter whose B is nonzero, the base folder): lora_A gets gradients too."""
    base = save_base(arch, tokenizer, folder)
    policy = load_policy(base, lora_r=4, load_in_4bit=True, bnb_4bit_compute_dtype=bnb_4bit_compute_dtype)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return policy, base


def dequantized_reference(policy, base, lora_r):
    """``policy``'s base weights dequantized into a float64 copy of ``base``, with its LoRA weights."""
    import bitsandbytes as bnb
    from bitsandbytes.functional import dequantize_4bit
    from peft import LoraConfig, get_peft_model

    ref = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float64)
    weights = {
        name.removeprefix("base_model.model.").replace(".base_layer", "") + ".weight": dequantize_4bit(
            mod.weight.data, mod.weight.quant_state
        ).double()
        for name, mod in policy.named_modules()
        if isinstance(mod, bnb.nn.Linear4bit)
    }
    assert len(weights) == 14 and not ref.load_state_dict(weights, strict=False).unexpected_keys
    ref = get_peft_model(ref, LoraConfig(r=lora_r, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    lora = {k: v.double() for k, v in policy.state_dict().items() if "lora_" in k}
    assert not ref.load_state_dict(lora, strict=False).unexpected_keys
    return ref


def trainer(tmp_path, steps, **kw):
    return L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        **kw,
    )


def float64_norms(model):
    """``model`` with every RMSNorm computing in its input dtype (transformers' upcasts to float32).

    transformers' RMSNorm runs in float32 even for a float64 model (for bf16 stability), so a "float64"
    model is only float32-exact wherever a gradient is summed before a norm's backward instead of after
    it, as the shared-prompt update does for a group's prompt (~1e-7 apart). The same formula in float64
    makes both orders agree to ~1e-15, which lets the tests check the equality at 1e-10.

    transformers 5.25 loads models with hub kernels on wherever the ``kernels`` package imports, and its
    ``train()`` / ``eval()`` then kernelize again, which puts the stock norm's forward back: so the kernels
    are turned off first (a CPU run has none to lose), or a later ``model.train()`` would undo the patch.
    """
    import types

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def gemma(self, x):  # Gemma's norm scales by (1 + weight), its epsilon named eps
        return (1.0 + self.weight) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    for module in model.modules():
        if getattr(module, "use_kernels", False):  # PreTrainedModel's property: False resets the kernels
            module.use_kernels = False
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    assert norms, "no RMSNorm found"
    for m in norms:
        m.forward = types.MethodType(forward if hasattr(m, "variance_epsilon") else gemma, m)
    return model


def merged(base: dict, **changes) -> dict:
    """``GRPOModule`` arguments ``base`` with ``changes``: a mapping given for a group updates that group's fields
    (``merged(SMALL, optimizer={"warmup_steps": 3})`` keeps SMALL's learning rate); any other value replaces."""
    import dataclasses

    out = dict(base)
    for key, value in changes.items():
        old = out.get(key)
        if isinstance(value, dict) and dataclasses.is_dataclass(old):
            out[key] = dataclasses.replace(old, **value)
        elif isinstance(value, dict) and isinstance(old, dict) and key != "functions":
            out[key] = {**old, **value}
        else:
            out[key] = value
    return out


class Loaded(Exception):
    """The model began to load: every check before loading passed (see :func:`refuse_model_load`)."""


def refuse_model_load(monkeypatch, tmp_path):
    """Makes a run that gets as far as loading the model raise :class:`Loaded`, from ``tmp_path`` (where runs/ of a
    run that got through would land): for cases that must stop, or warn, before the model loads."""

    def refuse(*args, **kwargs):
        raise Loaded

    monkeypatch.setattr("infgrpo.module.load_policy", refuse)
    monkeypatch.chdir(tmp_path)


def torchrun_two(script: str, *args: str, what: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Runs ``script`` with ``args`` on 2 ranks under ``torchrun`` (one torch thread each) from the repository root.

    The launcher gets its own session, so a hang (ranks disagreeing on collectives) kills both ranks after
    ``timeout`` seconds, not just torchrun, and fails the test naming ``what`` ran.
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", script, *args]
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{what} did not finish within {timeout:g} s (ranks waiting on each other?)")
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)
