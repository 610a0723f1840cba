"""Whether a checkpoint's weights fit the model a run builds, judged from its hyper-parameters before loading.

    checkpoint_mismatch(saved["hyper_parameters"], settings)   # 'the checkpoint was trained with lora.r=0 ...'

The module a resumed run builds comes from the command's settings, and Lightning loads the checkpoint's
``state_dict`` into it: a checkpoint of full fine-tuning (``lora.r: 0``) resumed with ``lora.r: 8``, another rank,
other LoRA target modules or 4-bit base weights fails there with torch's "Missing key(s) in state_dict" (one line of
thousands of characters) after the model loaded. The settings that shape the ``state_dict`` are compared here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infgrpo.training.compat_v01 import group_flat_hparams

SHAPING = (("lora", "r"), ("lora", "target_modules"), ("quantization", "load_in_4bit"))
"""The settings whose values decide the names and shapes of the module's weights."""


def checkpoint_mismatch(saved: Mapping[str, Any] | None, settings: Any) -> str | None:
    """What differs between the checkpoint's hyper-parameters ``saved`` and the run's ``settings`` (a
    ``ModuleSettings``) among :data:`SHAPING`, as one sentence; None when they agree or ``saved`` lacks them."""
    if not isinstance(saved, Mapping):
        return None
    saved = group_flat_hparams(saved)  # a checkpoint of infgrpo 0.1
    differ = []
    for group, name in SHAPING:
        before = (saved.get(group) or {}).get(name) if isinstance(saved.get(group), Mapping) else None
        now = getattr(getattr(settings, group), name)
        if before is not None and before != now:
            differ.append((f"{group}.{name}", before, now))
    if not differ:
        return None
    was = ", ".join(described(key, before) for key, before, _ in differ)
    now = ", ".join(described(f"model.{key}", value) for key, _, value in differ)
    flags = " ".join(f"--model.{key} {before}" for key, before, _ in differ if not isinstance(before, list))
    return (
        f"the checkpoint was trained with {was}, and this run has {now}: its weights do not fit this model; resume "
        f"with the checkpoint's settings{f' ({flags})' if flags else ''}, or drop --ckpt_path to start a new run"
    )


def described(key: str, value: Any) -> str:
    """``key=value``, with what ``lora.r=0`` means."""
    return f"{key}={value!r}" + (" (full fine-tuning)" if key.endswith("lora.r") and value == 0 else "")
