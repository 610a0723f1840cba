"""Compatibility with infgrpo 0.1, whose ``GRPOModule`` took flat arguments (``loss_type``, ``lora_r``, ...).

**The messages go away in infgrpo 0.4** (0.3 kept them: see the CHANGELOG), with the 56 moved keys: from then on
a flat key is an unknown setting, and a 0.1 checkpoint is upgraded by infgrpo 0.3's command. A
0.1 checkpoint loads through :mod:`infgrpo.upgrade_checkpoint` (a one-off command that moves its hyper-parameters
into the groups), not through a shim on ``GRPOModule``.

    MOVED["loss_type"]                                # 'objective.loss_type': each flat key's key in the groups
    group_flat_hparams(old["hyper_parameters"])       # a 0.1 checkpoint's hyper-parameters, in the groups
    old_keys(["--config", "old.yaml"])                # fit's message for a 0.1 key in a config or a flag, or None

What each caller does with it: ``check_settings`` names the new key of a flat argument (:func:`moved_hint`)
and refuses 0.1's ``rewards`` mapping of names to weights (:func:`check_rewards_mapping`); ``fit`` refuses the
flat keys of a YAML config or a ``--model.`` flag before parsing (:func:`old_keys`); ``python -m
infgrpo.upgrade_checkpoint`` moves a 0.1 checkpoint's hyper-parameters into their groups (:func:`group_flat_hparams`).
Resuming a run (``fit --ckpt_path``) never builds the module from them (it is built from the configuration).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
GROUPED = (
    "GRPOModule's settings are in groups since 0.2 (docs/migration-0.2.md maps every key of 0.1; TRL's names are kept "
    "inside the groups)"
)


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


def old_keys(argv: list[str]) -> str | None:
    """The message for the flat keys of infgrpo 0.1 under ``model`` in ``argv``'s YAML files or flags, if any: every
    one of them, in one line; a ``--model.rewards`` flag or YAML ``rewards`` mapping names to weights included.

    Such a key is now in a group (:data:`MOVED`); it is named with its new key, never read as the new one.
    """
    found: list[tuple[str, str]] = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        if name in ("-c", "--config"):
            found += [(k, f"in {value}") for k in yaml_model_keys(value)]
        elif name == "--model.rewards" and is_old_rewards(yaml_value(value)):
            found.append(("rewards:weights", f"({name})"))
        elif name.startswith("--model."):
            found.append((name.removeprefix("--model.").split(".")[0], f"({name})"))
    messages = [
        f"model.rewards {where} maps reward names to weights: they go in model.rewards.functions now "
        "(model.rewards is a group: functions, accuracy, on_error)"
        for key, where in found[:1] + found[1:]
        if key == "rewards:weights"
    ][:1]
    flat = list(dict.fromkeys((key, where) for key, where in found if key in FLAT_ONLY))
    if flat:
        messages.append(moved_keys_message(flat))
    return "; ".join(messages) or None


def moved_keys_message(flat: list[tuple[str, str]]) -> str:
    """``model.<key> <where> is model.<group>.<key> now: ...`` for one flat key; for several, every pair."""
    if len(flat) == 1:
        key, where = flat[0]
        return f"model.{key} {where} is model.{MOVED[key]} now: {GROUPED}"
    wheres = list(dict.fromkeys(where for _, where in flat))
    if len(wheres) == 1:
        pairs = ", ".join(f"model.{key} is model.{MOVED[key]}" for key, _ in flat)
        return f"{len(flat)} keys of infgrpo 0.1 {wheres[0]}: {pairs} now: {GROUPED}"
    pairs = ", ".join(f"model.{key} {where} is model.{MOVED[key]}" for key, where in flat)
    return f"{len(flat)} keys of infgrpo 0.1: {pairs} now: {GROUPED}"


def yaml_value(text: str) -> Any:
    """``text`` (a command-line value) read as YAML, or None when it is no YAML."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
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
