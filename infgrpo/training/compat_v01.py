"""Compatibility with infgrpo 0.1, whose ``GRPOModule`` took flat arguments (``loss_type``, ``lora_r``, ...).

**Goes away in infgrpo 0.4**, with the 56 moved keys: from then on a flat key is an unknown setting, and a 0.1
checkpoint loads only through a script that moves its hyper-parameters into the groups.

    MOVED["loss_type"]                                # 'objective.loss_type': each flat key's key in the groups
    group_flat_hparams(old["hyper_parameters"])       # a 0.1 checkpoint's hyper-parameters, in the groups
    GRPOModule.load_from_checkpoint(grouped_checkpoint("old.ckpt"))   # what GRPOModule.load_from_checkpoint does
    old_keys(["--config", "old.yaml"])                # fit's message for a 0.1 key in a config or a flag, or None

What each caller does with it: ``check_settings`` names the new key of a flat argument (:func:`moved_hint`)
and refuses 0.1's ``rewards`` mapping of names to weights (:func:`check_rewards_mapping`); ``fit`` refuses the
flat keys of a YAML config or a ``--model.`` flag before parsing (:func:`old_keys`); loading a module from a
checkpoint moves the flat hyper-parameters into their groups first (:func:`grouped_checkpoint`). Resuming a run
(``fit --ckpt_path``) never reads the hyper-parameters (the module is built from the configuration).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import torch
import yaml

from infgrpo.rewards.config import RewardConfig
from infgrpo.settings import ConfigError

_RENAMED = {
    "model": "policy.model_name_or_path", "lora_r": "lora.r", "lora_alpha": "lora.alpha",
    "lora_dropout": "lora.dropout", "lora_target_modules": "lora.target_modules", "rewards": "rewards.functions",
    "accuracy_reward": "rewards.accuracy", "reward_on_error": "rewards.on_error",
    "eval_temperature": "evaluation.temperature",
}  # fmt: skip
_SAME_NAME = {  # 0.1's flat keys that kept their names in a group (a fixed list: new fields never were flat)
    "policy": ("gguf_file", "dtype", "gradient_checkpointing"),
    "quantization": ("load_in_4bit", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_compute_dtype"),
    "objective": (
        "advantage", "scale_rewards", "loss_type", "epsilon_low", "epsilon_high", "beta", "kl_estimator",
        "kl_bias_correction", "delta", "importance_sampling_level", "sapo_temperature_pos", "sapo_temperature_neg",
        "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg", "top_entropy_quantile", "entropy_coef",
        "use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target",
        "off_policy_mask_threshold", "rollout_correction", "rollout_correction_clip_max",
        "rollout_correction_clip_min", "mask_truncated_completions",
    ),
    "update": ("num_iterations", "share_prompt", "token_budget", "update_memory", "logit_chunk_tokens"),
    "optimizer": ("learning_rate", "weight_decay", "warmup_steps", "lr_scheduler_type", "max_grad_norm"),
    "logging": ("log_completions_every_n_steps", "num_completions_to_log"),
}  # fmt: skip
REWARD_FIELDS = frozenset(f.name for f in dataclasses.fields(RewardConfig))
MOVED: dict[str, str] = {**_RENAMED, **{name: f"{g}.{name}" for g, names in _SAME_NAME.items() for name in names}}
"""Each flat ``GRPOModule`` argument of infgrpo 0.1 -> its key in the groups (``loss_type`` ->
``objective.loss_type``). ``group_size``, ``sampler``, ``output_dir``, ``seed`` and ``threads`` stayed."""
FLAT_ONLY = frozenset(MOVED) - {"rewards"}
"""The keys of :data:`MOVED` that no group is named after (``rewards`` became the name of a group)."""


def moved_hint(key: str) -> str:
    """``"; it is <group.field> now"`` when ``key`` is a flat argument of 0.1, else ``""`` (for an unknown key)."""
    return f"; it is {MOVED[key]} now" if key in MOVED else ""


def is_old_rewards(rewards: Any) -> bool:
    """Whether ``rewards`` is 0.1's form: a non-empty mapping of reward names to weights (not of the group's
    fields)."""
    return isinstance(rewards, Mapping) and bool(rewards) and not set(rewards) <= REWARD_FIELDS


def check_rewards_mapping(rewards: Any) -> None:
    """A :class:`~infgrpo.settings.ConfigError` when ``rewards`` maps reward names to weights (0.1's form)."""
    if is_old_rewards(rewards):
        raise ConfigError(
            f"rewards={dict(rewards)!r}: reward functions and weights go in rewards.functions, e.g. "
            "rewards: {functions: {synthetic: 1.0}, accuracy: synthetic}"
        )


def is_flat(hp: Mapping[str, Any]) -> bool:
    """Whether ``hp`` are ``GRPOModule`` hyper-parameters of infgrpo 0.1 (flat: ``model``, ``lora_r``, ...)."""
    if any(key in FLAT_ONLY for key in hp):
        return True
    return is_old_rewards(hp.get("rewards"))


def group_flat_hparams(hp: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's hyper-parameters in the groups: flat keys of infgrpo 0.1 moved by :data:`MOVED`.

    Grouped hyper-parameters (and keys Lightning adds, like ``_instantiator``) come back unchanged.
    """
    if not is_flat(hp):
        return dict(hp)
    out: dict[str, Any] = {}
    for key, value in hp.items():
        if key in MOVED:
            group, name = MOVED[key].split(".")
            out.setdefault(group, {})[name] = value
        else:
            out[key] = value
    return out


def grouped_checkpoint(checkpoint: str | Path | IO[bytes]) -> Any:
    """``checkpoint`` itself when its hyper-parameters are grouped (or absent); else an in-memory copy with the
    flat hyper-parameters moved into their groups (the weights are read once through a memory map)."""
    if not isinstance(checkpoint, str | Path):
        return checkpoint  # a stream or URL: Lightning's own loading
    path = Path(checkpoint)
    if not path.is_file():
        return checkpoint
    state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    hparams = state.get("hyper_parameters")
    if not isinstance(hparams, dict) or not is_flat(hparams):
        return checkpoint
    state["hyper_parameters"] = group_flat_hparams(hparams)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


def old_keys(argv: list[str]) -> str | None:
    """The message for the first flat key of infgrpo 0.1 under ``model`` in ``argv``'s YAML files or flags, if any.

    Such a key is now in a group (:data:`MOVED`); it is named with its new key, never read as the new one.
    """
    found: list[tuple[str, str]] = []
    for i, arg in enumerate(argv):
        name, _, value = arg.partition("=")
        if name in ("-c", "--config"):
            path = value or (argv[i + 1] if i + 1 < len(argv) else "")
            found += [(k, f"in {path}") for k in yaml_model_keys(path)]
        elif name.startswith("--model."):
            found.append((name.removeprefix("--model.").split(".")[0], f"({name})"))
    for key, where in found:
        if key == "rewards:weights":
            return (
                f"model.rewards {where} maps reward names to weights: they go in model.rewards.functions now "
                "(model.rewards is a group: functions, accuracy, on_error)"
            )
        if key in FLAT_ONLY:
            return (
                f"model.{key} {where} is model.{MOVED[key]} now: GRPOModule's settings are in groups (the README's "
                "table lists every key; TRL's names are kept inside the groups)"
            )
    return None


def yaml_model_keys(path: str) -> list[str]:
    """The keys of the ``model`` section of the YAML file ``path`` ([] if it cannot be read: the parser says why).

    A ``rewards`` mapping of reward names (0.1's form) counts as the key ``rewards.functions`` moved to.
    """
    try:
        section = (yaml.safe_load(Path(path).read_text()) or {}).get("model") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        return []
    if not isinstance(section, dict):
        return []
    section = section.get("init_args", section)
    keys = list(section)
    rewards = section.get("rewards")
    if isinstance(rewards, dict) and not set(rewards) <= REWARD_FIELDS:
        keys[keys.index("rewards")] = "rewards:weights"
    return keys
