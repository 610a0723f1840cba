"""``model.lora.target_modules`` checked against the model's modules before its weights load.

    check_lora_targets(config, LoRAConfig(r=8, target_modules=["q_proj", "v_proj"]))   # ConfigError if none matches

peft refuses target modules that match no module of the model only after the weights loaded, with a long
message that does not name the setting. Here the model is built from its config on the ``meta`` device (no
memory, no weights) and matched by peft's rule (its ``check_target_module_exists``: a list entry equal to a
module's full name or to its end after a dot, a string a regular expression matching the whole name; peft itself
is not imported, which costs a second); the error lists the model's linear layers, the names that are valid.
"""

from __future__ import annotations

import re

import torch
from transformers import PretrainedConfig

from infgrpo.policy.config import LoRAConfig
from infgrpo.policy.load import model_class
from infgrpo.settings import ConfigError


def linear_names(model: torch.nn.Module) -> list[str]:
    """The last part of the name of every ``nn.Linear`` of ``model`` (``q_proj``, ``lm_head``, ...), in order."""
    names = [name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    return list(dict.fromkeys(names))


def targets(target_modules: str | list[str], name: str) -> bool:
    """Whether peft's ``target_modules`` select the module called ``name`` (its rule, above)."""
    if isinstance(target_modules, str):
        return re.fullmatch(target_modules, name) is not None
    return any(name == t or name.endswith(f".{t}") for t in target_modules)


def check_lora_targets(config: PretrainedConfig, lora: LoRAConfig) -> None:
    """Raises a ConfigError naming ``model.lora.target_modules`` when it matches no module of the model built
    from ``config``; nothing to check without LoRA (``r: 0``) or for ``all-linear``."""
    if lora.r == 0 or lora.target_modules == "all-linear":
        return
    with torch.device("meta"):
        model = model_class(config).from_config(config)
    if any(targets(lora.target_modules, name) for name, _ in model.named_modules()):
        return
    raise ConfigError(
        f"model.lora.target_modules={lora.target_modules!r} names no module of the model "
        f"({type(model).__name__}); valid: its linear layers {', '.join(linear_names(model))} (a list of them, or "
        "a regular expression over whole module names), or 'all-linear'"
    )
