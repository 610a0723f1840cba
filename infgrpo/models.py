"""Loading the policy: a Hugging Face id or local folder, a dtype, optional LoRA adapters."""

from __future__ import annotations

import copy

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from infgrpo.assets import resolve_model_path

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def check_dtype(dtype: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not known; valid: {', '.join(DTYPES)}")
    return DTYPES[dtype]


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The tokenizer of ``name`` (``"tiny"`` = the shipped model), with a pad token guaranteed."""
    tok = AutoTokenizer.from_pretrained(resolve_model_path(name))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_policy(
    name: str,
    dtype: str = "float32",
    lora_r: int = 0,
    lora_alpha: int = 16,
    lora_dropout: float = 0.0,
    lora_target_modules: str | list[str] = "all-linear",
) -> PreTrainedModel:
    """The trainable policy; with ``lora_r > 0`` a peft model whose base weights are frozen."""
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(name), dtype=check_dtype(dtype))
    if lora_r < 0:
        raise ValueError(f"lora_r={lora_r} must be >= 0 (0 = full fine-tuning)")
    if lora_r > 0:
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(
            r=lora_r,
            lora_alpha=lora_alpha,
            lora_dropout=lora_dropout,
            target_modules=lora_target_modules,
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, cfg)
    return model


def frozen_reference(model: PreTrainedModel) -> PreTrainedModel:
    """A frozen copy of ``model`` in eval mode, used as the KL reference for full fine-tuning."""
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref
