"""The two sides of a vision-language model: the language model, and the vision side (tower and projector).

    targets = language_lora_targets(model)   # a regular expression over the language model's linear layers
    frozen = freeze_vision(model)            # the vision side's parameters no longer train; their count
    fixed_vision(model)                      # True: its features do not change from one forward to the next

The language model is what ``model.get_decoder()`` returns (``model.language_model`` in Qwen-VL, ``model.text_model``
in Idefics3); the LM head stays out of LoRA as peft's ``all-linear`` leaves it. Everything else with parameters is the
vision side: Qwen-VL's ``visual`` (its merger included), Idefics3's ``vision_model`` and ``connector``. peft's
``all-linear`` puts adapters on the vision side too (TRL's runs train it); infgrpo's default
(``model.policy.train_vision_tower: false``) targets the language model only and freezes the rest.
"""

from __future__ import annotations

import re

from torch import nn


def language_model_name(model: nn.Module) -> str:
    """The dotted name of ``model``'s language model (its ``get_decoder()``) among its modules."""
    decoder = model.get_decoder()
    for name, module in model.named_modules():
        if module is decoder:
            return name
    raise ValueError(f"{type(model).__name__}.get_decoder() is none of its modules")


def vision_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters of the vision side (outside the language model and the LM head), by name."""
    language = language_model_name(model) + "."
    head = model.get_output_embeddings()
    head_ids = {id(p) for p in head.parameters()} if head is not None else set()
    return [(n, p) for n, p in model.named_parameters() if not n.startswith(language) and id(p) not in head_ids]


def language_lora_targets(model: nn.Module, target_modules: str | list[str] = "all-linear") -> str:
    """peft ``target_modules`` (a regular expression over whole module names) selecting what ``target_modules``
    selects, inside the language model only: ``all-linear`` is every linear layer of the language model (not the
    vision side, not the LM head); a list of names keeps peft's rule (a name or its last dotted parts); a regular
    expression must also match."""
    language = re.escape(language_model_name(model))
    if target_modules == "all-linear":
        decoder = model.get_decoder()
        leaves = sorted({n.rsplit(".", 1)[-1] for n, m in decoder.named_modules() if isinstance(m, nn.Linear)})
        return rf"{language}\..*\.(?:{'|'.join(map(re.escape, leaves))})"
    if isinstance(target_modules, str):
        return rf"(?={language}\.)(?:{target_modules})"
    return rf"{language}\.(?:.*\.)?(?:{'|'.join(map(re.escape, target_modules))})"


def freeze_vision(model: nn.Module) -> int:
    """Turns off the gradients of the vision side's parameters; returns how many tensors it froze."""
    params = vision_parameters(model)
    for _, p in params:
        p.requires_grad_(False)
    return len(params)


def trainable_vision(model: nn.Module) -> list[str]:
    """Names of the vision side's parameters that train (adapters included): [] when it is frozen."""
    language = language_model_name(model) + "."
    return [
        n for n, p in model.named_parameters() if p.requires_grad and not n.startswith(language) and "lm_head" not in n
    ]


def fixed_vision(model: nn.Module) -> bool:
    """Whether the vision side gives the same features at every forward (so a step may encode each image once and
    reuse it): none of its parameters trains, it holds no adapters, and none of its dropouts is active (a module in
    training mode with a rate above 0: ``nn.Dropout.p``, the attention layers' ``dropout`` / ``attention_dropout``)."""
    if any(p.requires_grad or "lora_" in n for n, p in vision_parameters(model)):
        return False
    head = model.get_output_embeddings()
    outside = [language_model_name(model)] + [n for n, m in model.named_modules() if m is head]
    for name, module in model.named_modules():
        if not module.training or any(name == o or name.startswith(o + ".") for o in outside):
            continue
        if not name or any(o.startswith(name + ".") for o in outside):  # the model, or a module holding its LM
            continue
        rates = (module.p if isinstance(module, nn.Dropout) else None, *_attention_rates(module))
        if any(isinstance(r, float) and r > 0 for r in rates):
            return False
    return True


def _attention_rates(module: nn.Module) -> tuple[object, object]:
    """The dropout rates transformers' attention layers keep as plain numbers (``dropout``, ``attention_dropout``)."""
    return getattr(module, "dropout", None), getattr(module, "attention_dropout", None)
