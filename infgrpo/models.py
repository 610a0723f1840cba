"""Loading the policy: a Hugging Face id or local folder, a dtype, LoRA (peft), 4-bit (bitsandbytes).

    model = load_policy("Qwen/Qwen3-1.7B", dtype="bfloat16", lora_r=16, load_in_4bit=True)

4-bit loading quantizes the frozen base weights (nf4 or fp4, optional double quantization, a compute
dtype) and prepares the model for k-bit training (peft's ``prepare_model_for_kbit_training``); it
needs LoRA, since quantized weights cannot be trained directly.

On CPUs with AVX512-BF16, bitsandbytes (0.50) repacks a 4-bit layer's weights for a faster kernel on
its first eval-mode forward without gradients — every rollout — and that kernel has no backward: the
LoRA gradients through every repacked layer are wrong from then on (silently, up to 50% off in our
test). :func:`keep_4bit_trainable` turns the repacking off; ``load_policy`` calls it.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from infgrpo.assets import resolve_model_path

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
QUANT_TYPES = ("nf4", "fp4")


def check_dtype(dtype: str, field: str = "dtype") -> torch.dtype:
    """The torch dtype named ``dtype``; a ValueError naming ``field`` and the valid names otherwise."""
    if dtype not in DTYPES:
        raise ValueError(f"{field}={dtype!r} is not known; valid: {', '.join(DTYPES)}")
    return DTYPES[dtype]


def check_loading(lora_r: int, load_in_4bit: bool, bnb_4bit_quant_type: str, bnb_4bit_compute_dtype: str) -> None:
    """Validates the loading options before anything is downloaded or allocated."""
    if lora_r < 0:
        raise ValueError(f"lora_r={lora_r} must be >= 0 (0 = full fine-tuning)")
    if load_in_4bit and lora_r == 0:
        raise ValueError("load_in_4bit=True needs LoRA (lora_r > 0): 4-bit base weights cannot be trained directly")
    if bnb_4bit_quant_type not in QUANT_TYPES:
        raise ValueError(f"bnb_4bit_quant_type={bnb_4bit_quant_type!r} is not known; valid: nf4, fp4")
    check_dtype(bnb_4bit_compute_dtype, "bnb_4bit_compute_dtype")


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The tokenizer of ``name`` (``"tiny"`` = the shipped model), with a pad token guaranteed."""
    tok = AutoTokenizer.from_pretrained(resolve_model_path(name))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def keep_4bit_trainable(model: torch.nn.Module) -> int:
    """Stops bitsandbytes from repacking ``model``'s 4-bit layers into its inference-only CPU format.

    Returns the number of 4-bit layers seen. A no-op where bitsandbytes is absent or on GPUs (the
    repacking only happens for CPU inputs).
    """
    try:
        import bitsandbytes as bnb
    except ImportError:
        return 0
    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    for layer in layers:
        if hasattr(layer, "support_avx512bf16_for_cpu"):
            layer.support_avx512bf16_for_cpu = False
    return len(layers)


def load_policy(
    name: str,
    dtype: str = "float32",
    lora_r: int = 0,
    lora_alpha: int = 16,
    lora_dropout: float = 0.0,
    lora_target_modules: str | list[str] = "all-linear",
    load_in_4bit: bool = False,
    bnb_4bit_quant_type: str = "nf4",
    bnb_4bit_use_double_quant: bool = True,
    bnb_4bit_compute_dtype: str = "bfloat16",
    gradient_checkpointing: bool = False,
) -> PreTrainedModel:
    """The trainable policy; with ``lora_r > 0`` a peft model whose base weights are frozen."""
    check_loading(lora_r, load_in_4bit, bnb_4bit_quant_type, bnb_4bit_compute_dtype)
    kwargs: dict = {"dtype": check_dtype(dtype)}
    if load_in_4bit:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=bnb_4bit_quant_type,
            bnb_4bit_use_double_quant=bnb_4bit_use_double_quant,
            bnb_4bit_compute_dtype=DTYPES[bnb_4bit_compute_dtype],
        )
        kwargs["dtype"] = DTYPES[bnb_4bit_compute_dtype]
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(name), **kwargs)
    if load_in_4bit:
        from peft import prepare_model_for_kbit_training

        keep_4bit_trainable(model)
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)
    elif gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
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


def resolve_output_dir(output_dir: str | Path, root_dir: str | Path) -> Path:
    """``output_dir`` as given when absolute, else under ``root_dir`` (the run's ``trainer.default_root_dir``).

    So a run logged under one folder writes its adapter there too, e.g. ``adapter`` with
    ``--trainer.default_root_dir runs/a`` -> ``runs/a/adapter``.
    """
    path = Path(output_dir).expanduser()
    return path if path.is_absolute() else Path(root_dir) / path


def save_trained(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | Path) -> Path:
    """Writes the LoRA adapter (a standard peft adapter folder) or, without LoRA, the whole model."""
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def export_merged(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, base_name: str, path: str | Path, dtype: str = "float32"
) -> Path:
    """A full model with the LoRA adapter merged in, loadable by ``AutoModelForCausalLM``.

    The base is reloaded unquantized in ``dtype`` (a 4-bit base cannot be merged exactly), the
    trained adapter weights are copied onto it and merged.
    """
    from peft import get_peft_model

    if not hasattr(model, "peft_config"):
        raise ValueError("export_merged needs a LoRA model (lora_r > 0); save_trained writes a full model")
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path(base_name), dtype=check_dtype(dtype))
    fresh = get_peft_model(base, copy.deepcopy(model.peft_config["default"]))
    lora_state = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    missing = fresh.load_state_dict(lora_state, strict=False)
    if missing.unexpected_keys:
        raise RuntimeError(f"adapter weights did not fit the base model: {missing.unexpected_keys[:3]}")
    merged = fresh.merge_and_unload()
    merged.save_pretrained(Path(path))
    tokenizer.save_pretrained(Path(path))
    return Path(path)
