"""``GRPOModule``'s settings: the groups, checked before anything loads.

    settings = check_settings(policy={"model_name_or_path": "smollm2"}, lora=LoRAConfig(r=16), group_size=8)
    settings.objective.loss_type           # every group built and checked; errors name ``group.field``
    settings.hparams()                     # plain nested dicts: the checkpoint's hyper-parameters

Each group is a dataclass that checks its own fields (types included) where it is built; this module builds
them from instances or mappings (:func:`~infgrpo.settings.build_group`) and checks the top-level values and the
combinations of groups. The flat arguments of infgrpo 0.1 are named with their new keys by
:mod:`infgrpo.training.compat_v01` (until 0.4).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infgrpo.agent import AgentConfig
from infgrpo.algo import Objective
from infgrpo.algo.zero_advantage import resolve_skip
from infgrpo.evaluation import EvaluationConfig
from infgrpo.policy.config import LoRAConfig, PolicyConfig, QuantizationConfig, check_policy
from infgrpo.rewards.config import RewardConfig
from infgrpo.runtime.seeds import run_seed
from infgrpo.runtime.threads import Threads, check_threads
from infgrpo.sampler import SamplerConfig
from infgrpo.settings import ConfigError, InfgrpoWarning, build_group, check_types
from infgrpo.training.adaptive import AdaptiveGroupsConfig
from infgrpo.training.compat_v01 import check_rewards_mapping, moved_hint
from infgrpo.training.dynamic import DynamicSamplingConfig
from infgrpo.training.optim import OptimizerConfig
from infgrpo.training.settings_checks import (
    check_agent,
    check_judged_rollout,
    warn_filtered_behaviour_logprobs,
    warn_ignored,
)
from infgrpo.update.config import UpdateConfig


@dataclass
class LoggingConfig:
    """What a run logs besides its metrics (``model.logging``).

    Read by ``GRPOModule.configure_callbacks``, which attaches the
    :class:`~infgrpo.callbacks.completion_table.CompletionTable`; kept here, with the groups, so that settings
    never import a callback (nor Lightning through it).
    """

    log_completions_every_n_steps: int = 0
    """Every N steps, log a table of prompts, completions and rewards to the loggers and the console
    (0 = never; TRL's ``log_completions``)."""
    num_completions_to_log: int = 4
    """Rows of that table (TRL's ``num_completions_to_print``)."""

    def __post_init__(self) -> None:
        check_types(self)
        for name in ("log_completions_every_n_steps", "num_completions_to_log"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be an integer >= 0")


GROUPS: dict[str, type] = {
    "policy": PolicyConfig,
    "lora": LoRAConfig,
    "quantization": QuantizationConfig,
    "sampler": SamplerConfig,
    "rewards": RewardConfig,
    "objective": Objective,
    "update": UpdateConfig,
    "optimizer": OptimizerConfig,
    "evaluation": EvaluationConfig,
    "logging": LoggingConfig,
    "dynamic_sampling": DynamicSamplingConfig,
    "adaptive_groups": AdaptiveGroupsConfig,
    "agent": AgentConfig,
}
"""``GRPOModule``'s groups by key (``model.<key>.<field>`` on the command line)."""


@dataclass(frozen=True)
class ModuleSettings:
    """Every setting of a ``GRPOModule``, checked: the groups and the values that belong to none."""

    policy: PolicyConfig
    lora: LoRAConfig
    quantization: QuantizationConfig
    group_size: int
    sampler: SamplerConfig
    rewards: RewardConfig
    objective: Objective
    update: UpdateConfig
    optimizer: OptimizerConfig
    evaluation: EvaluationConfig
    logging: LoggingConfig
    dynamic_sampling: DynamicSamplingConfig
    adaptive_groups: AdaptiveGroupsConfig
    agent: AgentConfig
    output_dir: str | None
    seed: int
    threads: Threads

    def hparams(self) -> dict[str, Any]:
        """Plain nested dicts and values (so a checkpoint loads with ``torch.load(weights_only=True)``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["agent"] = self.agent.recorded()  # tools and environments given as objects: their import paths
        return {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in out.items()}


def check_settings(
    group_size: int = 8, output_dir: str | None = None, seed: int | None = None, threads: Any = "auto", **groups: Any
) -> ModuleSettings:
    """Builds and checks every group (instances are copied; mappings, None and missing ones built) and the
    top-level values; a :class:`~infgrpo.settings.ConfigError` names the first bad ``group.field``.

    ``seed`` None becomes the run's seed (:func:`~infgrpo.runtime.seeds.run_seed`).
    """
    unknown = [k for k in groups if k not in GROUPS]
    if unknown:  # a flat argument of infgrpo 0.1 is named with its new key
        raise ConfigError(f"{unknown[0]} is not a setting of GRPOModule{moved_hint(unknown[0])}")
    check_rewards_mapping(groups.get("rewards"))  # 0.1's mapping of reward names to weights
    built = {key: build_group(cls, groups.get(key), key) for key, cls in GROUPS.items()}
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ConfigError(f"group_size={group_size!r} must be an integer >= 2 (GRPO compares samples of a group)")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"seed={seed!r} must be an integer, or null (the run's seed_everything)")
    if output_dir is not None and (not isinstance(output_dir, str) or not output_dir.strip()):
        raise ConfigError(f"output_dir={output_dir!r} must be a folder path, or null (nothing written)")
    try:
        threads = check_threads(threads, "threads")
    except ValueError as err:
        raise ConfigError(str(err)) from err
    check_policy(built["policy"], built["lora"], built["quantization"])
    resolve_skip(built["update"].skip_zero_advantage, built["objective"], warn=False)  # 'on' where not exact
    warn_filtered_behaviour_logprobs(built["sampler"], built["objective"])
    check_judged_rollout(built, group_size)  # dynamic sampling and adaptive groups: the engine decodes
    check_agent(built)  # tools: the engine decodes
    warn_ignored(built, group_size)  # values a run would ignore, greedy groups without a gradient
    return ModuleSettings(
        group_size=group_size, output_dir=output_dir, seed=run_seed(seed),
        threads=threads, **built,
    )  # fmt: skip


def resumed_seed(settings: ModuleSettings, given: bool, saved: Mapping[str, Any] | None) -> ModuleSettings:
    """The settings a resumed run continues with: a seed derived from ``seed_everything`` (not ``given``) becomes
    the checkpoint's (``saved`` hyper-parameters), so the run draws the rollouts it would have drawn; an explicit
    one that differs is kept, with a warning."""
    seed = (saved or {}).get("seed")
    if not isinstance(seed, int) or seed == settings.seed:
        return settings
    if given:
        warnings.warn(
            f"[infgrpo] seed={settings.seed} differs from the checkpoint's {seed}: the resumed rollouts draw other "
            "completions than the interrupted run would have",
            InfgrpoWarning,
            stacklevel=3,
        )
        return settings
    return dataclasses.replace(settings, seed=seed)
