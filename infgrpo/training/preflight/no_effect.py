"""Settings that are taken and then do nothing: a warning each, before the model loads (the Python API: as fit starts).

    warn_no_effect(settings, config["data"])   # a step of preflight.door's STEPS (both doors)

The pattern of :mod:`infgrpo.training.settings_checks` (which the settings' own check calls), for what it does not
cover:

- ``adaptive_groups.*`` fields changed while ``adaptive_groups.enabled`` is false: no group is extended;
- ``adaptive_groups.max_samples_per_prompt`` equal to ``group_size`` with adaptive groups on: a prompt starts with
  ``group_size`` samples, so no group can grow;
- ``agent.*`` fields (``max_turns``, ``tool_workers``, ``tool_timeout``, ``chat_template``, ...) changed while
  neither ``agent.tools`` nor ``agent.environment`` is set: no completion calls a tool;
- a weight of 0 in ``rewards.functions``: the function is computed and logged, and adds nothing to the reward
  (unless it is ``rewards.accuracy``, kept for its accuracy metric); every weight 0 leaves no step a gradient;
- ``data.config_name`` with a local ``data.path`` (``tiny``, a folder, a file) or a reasoning-gym task: it selects a
  hub dataset's configuration only;
- ``data.eval_fraction`` over a folder (or ``tiny``) that has a file of ``data.eval_split``: the fraction holds out
  training rows, and that file goes unused (``data.eval_split: null`` says so and silences it).

The shipped configs (``configs/*.yaml``) raise none of them.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infgrpo.assets import TINY_DATA_DIR
from infgrpo.data.local_files import FILE_TYPES
from infgrpo.data.reasoning_tasks import is_reasoning_gym
from infgrpo.settings import InfgrpoWarning


def adaptive_no_effect(adaptive: Any, group_size: int) -> list[str]:
    """Warnings for ``adaptive_groups`` (an ``AdaptiveGroupsConfig``) with ``group_size``."""
    default = type(adaptive)()
    changed = [
        f"model.adaptive_groups.{f.name}={getattr(adaptive, f.name)!r}"
        for f in dataclasses.fields(adaptive)
        if f.name != "enabled" and getattr(adaptive, f.name) != getattr(default, f.name)
    ]
    if changed and not adaptive.enabled:
        verb = "is" if len(changed) == 1 else "are"
        return [
            f"{', '.join(changed)} {verb} ignored: model.adaptive_groups.enabled is false (set "
            "--model.adaptive_groups.enabled true to extend groups without a reward spread)"
        ]
    if adaptive.enabled and adaptive.max_samples_per_prompt == group_size:
        return [
            f"model.adaptive_groups.max_samples_per_prompt={group_size} equals model.group_size={group_size}: a "
            "prompt starts with group_size samples, so no group can be extended; raise it (e.g. "
            f"{4 * group_size}) or set model.adaptive_groups.enabled false"
        ]
    return []


def agent_no_effect(agent: Any) -> list[str]:
    """A warning for ``agent`` fields (an ``AgentConfig``) changed while no tool or environment is set."""
    if agent.enabled:
        return []
    default = type(agent)()
    changed = [
        f"model.agent.{f.name}={getattr(agent, f.name)!r}"
        for f in dataclasses.fields(agent)
        if f.name not in ("tools", "environment") and getattr(agent, f.name) != getattr(default, f.name)
    ]
    if not changed:
        return []
    verb = "does" if len(changed) == 1 else "do"
    return [
        f"{', '.join(changed)} {verb} nothing: neither model.agent.tools nor model.agent.environment is set, so no "
        "completion calls a tool (set --model.agent.tools, e.g. [my_tools:add], or drop them)"
    ]


def reward_no_effect(functions: Mapping[str, float], accuracy: str | None) -> list[str]:
    """Warnings for weights of 0 in ``rewards.functions`` (``accuracy``: the reward kept for its metric)."""
    if functions and all(weight == 0 for weight in functions.values()):
        return [
            f"model.rewards.functions={dict(functions)!r}: every weight is 0, so every completion's reward is 0, every "
            "advantage 0 and no step has a gradient; give a reward a weight > 0"
        ]
    return [
        f"model.rewards.functions[{name!r}]=0 adds nothing to the reward: it is computed and logged only; give it a "
        "weight, or drop it"
        for name, weight in functions.items()
        if weight == 0 and name != accuracy
    ]


def data_no_effect(data: Mapping[str, Any]) -> list[str]:
    """Warnings for the data settings ``data``: ``config_name`` with a source that is not a hub dataset."""
    name, path = data.get("config_name"), data.get("path", "tiny")
    if name is None or not isinstance(path, str):
        return []
    local = path == "tiny" or Path(path).expanduser().exists()
    if not (local or is_reasoning_gym(path)):
        return []
    what = "a reasoning-gym task" if is_reasoning_gym(path) else "local data"
    return [
        f"data.config_name={name!r} is ignored: data.path={path!r} is {what}, and config_name selects a hub "
        "dataset's configuration (e.g. main for openai/gsm8k)"
    ]


def eval_split_unused(data: Mapping[str, Any]) -> list[str]:
    """A warning for ``data.eval_fraction`` over a folder (or ``tiny``) that has a file of ``data.eval_split``: the
    fraction holds out training rows, and that file goes unused."""
    fraction, split, path = data.get("eval_fraction") or 0.0, data.get("eval_split", "eval"), data.get("path", "tiny")
    if not fraction or not split or not isinstance(path, str) or data.get("train_dataset") is not None:
        return []
    folder = TINY_DATA_DIR if path == "tiny" else Path(path).expanduser()
    found = [f"{split}{ext}" for ext in FILE_TYPES if (folder / f"{split}{ext}").is_file()] if folder.is_dir() else []
    if not found:
        return []
    return [
        f"data.eval_fraction={fraction} holds out {fraction:.0%} of the training rows for evaluation, so data.path="
        f"{path!r}'s own held-out split {split!r} ({found[0]}) goes unused: set data.eval_fraction 0 to score that "
        "split, or data.eval_split null to hold out training rows without this warning"
    ]


def no_effect(settings: Any, data: Mapping[str, Any]) -> list[str]:
    """Every warning of the module for the checked ``settings`` (a ``ModuleSettings``) and ``data`` (a pure
    function)."""
    return [
        *adaptive_no_effect(settings.adaptive_groups, settings.group_size),
        *agent_no_effect(settings.agent),
        *reward_no_effect(settings.rewards.functions, settings.rewards.accuracy),
        *data_no_effect(data),
        *eval_split_unused(data),
    ]


def warn_no_effect(settings: Any, data: Mapping[str, Any]) -> None:
    """Warns (``[infgrpo] ...``) for each of :func:`no_effect`, from here (``stacklevel=1``: shown once)."""
    for message in no_effect(settings, data):
        warnings.warn(f"[infgrpo] {message}", InfgrpoWarning, stacklevel=1)
