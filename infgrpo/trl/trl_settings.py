"""TRL's side: TRL's defaults, read from the installed ``trl``, and the settings of one TRL config over them.

    trl = TrlSettings({"num_generations": 16}, {"num_generations"}, trl_defaults())
    trl["num_generations"], trl["learning_rate"]     # 16, TRL's default 1e-06
    trl.is_set("learning_rate")                       # False: a TRL default is written only where infgrpo's differs

A field is *set* when it was given with a value other than TRL's default, or than what transformers' or TRL's
``__post_init__`` turns that default into (:data:`EQUIVALENT_DEFAULTS`, :data:`DERIVED_DEFAULTS`): the notes name
only what a user set.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

from infgrpo.trl.fields import TRL_VERSION, ConversionError


@functools.cache
def trl_defaults() -> dict[str, Any]:
    """TRL's default of every field of :data:`~infgrpo.trl.fields.TRL_FIELDS` (the dataclass defaults, before
    ``__post_init__``), and the installed TRL's version under ``"__version__"``; a ConversionError when trl is not
    installed."""
    try:
        import trl
        from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig
        from trl.scripts.grpo import GRPOScriptArguments
    except ImportError as err:
        raise ConversionError(
            f"converting a TRL config needs trl for TRL's defaults: pip install 'trl=={TRL_VERSION}' ({err})"
        ) from err
    defaults: dict[str, Any] = {"env": None, "__version__": trl.__version__}
    for cls in (GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = f.default_factory()
            else:
                defaults[f.name] = None
    return defaults


def plain(value: Any) -> Any:
    """A TRL value as YAML writes it: enums as their value, torch dtypes by name, JSON strings of dict fields
    (TRL's command line passes ``'{"enable_thinking": false}'``) as dicts."""
    if isinstance(value, enum.Enum):
        return value.value
    if type(value).__name__ == "dtype" and str(value).startswith("torch."):
        return str(value).removeprefix("torch.")
    if isinstance(value, str) and value.startswith("{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _same_as_default(value: Any, default: Any) -> bool:
    """``value`` equals ``default``, also for a dataclass built with its defaults (transformers' AcceleratorConfig)."""
    if value == default:
        return True
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and default is None:
        try:
            return value == type(value)()
        except TypeError:
            return False
    return False


EQUIVALENT_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "report_to": ("none", [], ["none"], None),
    "debug": ("", [], None),
    "disable_tqdm": (None, False, True),  # transformers sets it from the log level
    "pad_to_multiple_of": ("auto", None),  # TRL: 128 on Neuron, else None
    "include_num_input_tokens_seen": ("no", False),
    "optim": ("adamw_torch_fused", "adamw_torch"),  # torch's AdamW either way
}
"""Values that mean a field's default (what ``__post_init__`` of transformers or TRL turns the default into)."""

DERIVED_DEFAULTS: dict[str, Callable[[TrlSettings, Any], bool]] = {
    "bf16": lambda trl, v: v in (None, not trl["fp16"]),
    "activation_checkpointing": lambda trl, v: v in (None, trl["gradient_checkpointing"]),
    "do_eval": lambda trl, v: v == (trl["eval_strategy"] != "no"),
    "dataloader_pin_memory": lambda trl, v: v == (not trl["use_cpu"]),
    "steps_per_generation": lambda trl, v: v in (None, trl["gradient_accumulation_steps"]),
    "generation_batch_size": lambda trl, v: (
        v is None
        or (trl.explicit is None and trl["steps_per_generation"] == trl["gradient_accumulation_steps"])
        or v == trl["per_device_train_batch_size"] * trl["gradient_accumulation_steps"]
    ),
}
"""Fields whose default TRL or transformers derive from other fields: ``(settings, value) -> is it the default``."""


class TrlSettings:
    """TRL's settings: the values given over TRL's defaults, and which of them are set (not TRL's default)."""

    def __init__(self, given: Mapping[str, Any], explicit: set[str] | None, defaults: Mapping[str, Any]) -> None:
        self.defaults = defaults
        self.values = {name: plain(value) for name, value in {**defaults, **given}.items()}
        self.explicit = explicit
        """The fields a mapping named; None for a ``GRPOConfig`` object (every field given: set = not default)."""

    def __getitem__(self, name: str) -> Any:
        return self.values.get(name)

    def is_set(self, name: str) -> bool:
        """Whether ``name`` was given with a value other than TRL's default (or what its default becomes)."""
        if self.explicit is not None and name not in self.explicit:
            return False
        value = self.values.get(name)
        if _same_as_default(value, plain(self.defaults.get(name))):
            return False
        if any(value == v and type(value) is type(v) for v in EQUIVALENT_DEFAULTS.get(name, ())):
            return False
        return not (name in DERIVED_DEFAULTS and DERIVED_DEFAULTS[name](self, value))

    def any_set(self, *names: str) -> bool:
        """Whether any of ``names`` is set."""
        return any(self.is_set(name) for name in names)

    def integer(self, name: str, least: int = 1) -> int:
        """``self[name]`` as an integer >= ``least``; a ConversionError naming the field otherwise."""
        value = self[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < least:
            raise ConversionError(f"{name}={value!r} must be an integer >= {least}")
        return int(value)
