"""The rules that read more than one settings group, each written once; :func:`~infgrpo.training.hparams.check_settings`
calls them after every group checked its own fields.

    check_judged_rollout(built, group_size)               # built: the settings groups by key; a ConfigError
    check_judged_batch(dynamic, adaptive, group_size, 4)  # the cap and budget hold a batch of data.batch_size
    warn_filtered_behaviour_logprobs(sampler, objective)  # hf_cb's filtered log-probs under a correction
    warn_ignored(built, group_size=8)                     # a warning per setting a run would ignore

**Judged rollouts.** Dynamic sampling and adaptive groups judge each group the moment its last sample ends, inside
the slot-pool engine (:mod:`infgrpo.sampler.engine.dynamic`, :mod:`infgrpo.sampler.engine.adaptive`); the baseline
decoders (``micro_groups``, ``hf_micro``, ``hf_full``, ``hf_cb``) return whole groups at the end of a rollout, so
either setting with one of them would fail in the first training step. The rules are the sampler's own
(:meth:`~infgrpo.sampler.SamplerConfig.require_engine`, :func:`~infgrpo.sampler.engine.adaptive.check_grow_scheme`,
:func:`~infgrpo.sampler.engine.adaptive.check_prompt_cap`), checked here before anything loads.

**Ignored settings**, a warning each (valid alone: a config may keep ``max_prompts`` for runs that turn dynamic
sampling on):

- ``dynamic_sampling.max_prompts`` with ``dynamic_sampling.enabled: false``: no prompt is drawn beyond the batch;
- ``adaptive_groups.rule: value_or_draw`` without dynamic sampling: there is no new prompt to draw (it is ``value``);
- ``quantization.upcast_to_float32`` without ``quantization.load_in_4bit``: there is no 4-bit path to upcast;
- ``lora.target_modules``, ``lora.alpha`` or ``lora.dropout`` changed with ``lora.r: 0``: full fine-tuning
  trains every weight and has no adapters to place;
- ``sampler.temperature: 0`` (or ``top_k: 1``): greedy decoding makes the ``group_size`` completions of a prompt
  identical, so their rewards are equal, every advantage is 0 and no step has a gradient, ever.

The shipped configs (``configs/*.yaml``) raise none of them.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from infgrpo.algo import Objective
from infgrpo.rewards.calls import required_names
from infgrpo.rewards.core import REWARDS, resolve_reward
from infgrpo.rewards.reward_model import looks_like_model
from infgrpo.sampler import SamplerConfig
from infgrpo.sampler.engine.adaptive import check_grow_scheme
from infgrpo.settings import ConfigError, InfgrpoWarning
from infgrpo.training.adaptive import AdaptiveGroupsConfig
from infgrpo.training.dynamic import DynamicSamplingConfig


def ignored_settings(built: Mapping[str, Any], group_size: int) -> list[str]:
    """The warnings (one sentence each, naming the keys and values) for the groups ``built`` (a pure function)."""
    found = []
    dynamic, quantization, sampler = built["dynamic_sampling"], built["quantization"], built["sampler"]
    if dynamic.max_prompts is not None and not dynamic.enabled:
        found.append(
            f"dynamic_sampling.max_prompts={dynamic.max_prompts} is ignored: dynamic_sampling.enabled is false "
            "(set --model.dynamic_sampling.enabled true to draw prompts beyond the batch)"
        )
    adaptive = built["adaptive_groups"]
    if adaptive.enabled and adaptive.rule == "value_or_draw" and not dynamic.enabled:
        found.append(
            "adaptive_groups.rule='value_or_draw' compares extending a group with drawing a new prompt, and "
            "dynamic_sampling.enabled is false: no prompt is drawn, so it is 'value' (set "
            "--model.dynamic_sampling.enabled true to draw)"
        )
    if quantization.upcast_to_float32 and not quantization.load_in_4bit:
        found.append(
            "quantization.upcast_to_float32=True is ignored: it applies to 4-bit loading only and "
            "quantization.load_in_4bit is false (policy.dtype sets the weights' dtype)"
        )
    lora, default_lora = built["lora"], type(built["lora"])()
    changed = [f"lora.{k}={getattr(lora, k)!r}" for k in ("target_modules", "alpha", "dropout")
               if getattr(lora, k) != getattr(default_lora, k)]  # fmt: skip
    if lora.r == 0 and changed:
        found.append(
            f"{', '.join(changed)} {'is' if len(changed) == 1 else 'are'} ignored: lora.r is 0 (full fine-tuning "
            "trains every weight; set lora.r > 0, e.g. --model.lora.r 16, for adapters)"
        )
    greedy = "temperature=0" if sampler.temperature == 0 else "top_k=1" if sampler.top_k == 1 else None
    if greedy is not None:
        found.append(
            f"sampler.{greedy} decodes greedily: the group_size={group_size} completions of a prompt are identical, "
            "their rewards equal and every advantage 0, so no step has a gradient; sample with "
            "sampler.temperature > 0 (e.g. 1.0; evaluation.temperature sets the held-out decoding)"
        )
    return found


def warn_ignored(built: Mapping[str, Any], group_size: int) -> None:
    """Warns (``[infgrpo] ...``) for each of :func:`ignored_settings`; issued from here (``stacklevel=1``), so that
    Python's default filter shows a message once although the command line checks the settings before the module
    checks them again."""
    for message in ignored_settings(built, group_size):
        warnings.warn(f"[infgrpo] {message}", InfgrpoWarning, stacklevel=1)


def check_judged_rollout(built: Mapping[str, Any], group_size: int) -> None:
    """Raises a ConfigError naming ``<group>.enabled`` when dynamic sampling or adaptive groups are on with a
    decoder other than ``engine``; adaptive groups also need their first group to fit and, with dynamic sampling,
    the continuous scheme."""
    for key in ("adaptive_groups", "dynamic_sampling"):
        if built[key].enabled:
            built["sampler"].require_engine(key)
    adaptive = built["adaptive_groups"]
    if not adaptive.enabled:
        return
    adaptive.check(group_size)
    if built["dynamic_sampling"].enabled:
        check_grow_scheme(built["dynamic_sampling"].scheme)


def check_agent(built: Mapping[str, Any]) -> None:
    """Raises a ConfigError when tools or an environment (``agent``) meet a decoder other than ``engine`` (a sample
    leaves the pool while its tools run), or when a reward needs ``environments`` and no ``agent.environment`` gives
    them. Dynamic sampling and adaptive groups take tools: their judge scores an ended group from its samples'
    exchanges (:mod:`infgrpo.training.judged_rollout`)."""
    if not built["agent"].environment:
        for name in built["rewards"].functions:
            if name not in REWARDS and looks_like_model(name):  # a reward model (its files: the preflight's checks)
                continue
            if "environments" in required_names(resolve_reward(name)):
                raise ConfigError(
                    f"rewards.functions[{name!r}] needs environments= (one environment a completion), which only a run "
                    "with agent.environment passes; set agent.environment (an import path), or drop the reward"
                )
    if built["agent"].enabled:
        built["sampler"].require_engine("agent")


def check_judged_batch(
    dynamic: DynamicSamplingConfig, adaptive: AdaptiveGroupsConfig, group_size: int, batch_size: int
) -> None:
    """A ConfigError when dynamic sampling's prompt cap or adaptive groups' sample budget cannot hold a batch of
    ``batch_size`` prompts (``data.batch_size``, known to the command line and to the data module, not to
    :func:`~infgrpo.training.hparams.check_settings`)."""
    if dynamic.enabled:
        dynamic.cap(batch_size)
    if adaptive.enabled:
        adaptive.budget(batch_size, group_size)


def warn_filtered_behaviour_logprobs(sampler: SamplerConfig, objective: Objective) -> None:
    """Warns when the behaviour log-probs a correction reads are not of the distribution the others decode.

    ``decoder: hf_cb`` returns log-probs after top-k / top-p filtering, every other decoder before it (the
    tempered distribution the training forward recomputes): with truncation on, ``rollout_correction`` and
    ``off_policy_mask_threshold`` then weigh or drop tokens by a ratio that includes the truncation.
    """
    if sampler.decoder != "hf_cb" or (not sampler.top_k and sampler.top_p >= 1.0):
        return
    if objective.rollout_correction != "none" or objective.off_policy_mask_threshold is not None:
        warnings.warn(
            f"sampler.decoder='hf_cb' with top_k={sampler.top_k}, top_p={sampler.top_p}: its behaviour log-probs are "
            f"taken after the filtering, so objective.rollout_correction={objective.rollout_correction!r} and "
            f"objective.off_policy_mask_threshold={objective.off_policy_mask_threshold!r} see the truncation as a "
            "mismatch (decoder 'engine' reports the unfiltered tempered log-probs the update recomputes)",
            InfgrpoWarning,
            stacklevel=3,
        )
