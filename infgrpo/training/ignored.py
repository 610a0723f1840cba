"""Settings that a run would take and then ignore, or that leave every group without a gradient: a warning each.

    warn_ignored(built, group_size=8)   # built: check_settings' groups by key

- ``dynamic_sampling.max_prompts`` with ``dynamic_sampling.enabled: false``: no prompt is drawn beyond the batch;
- ``adaptive_groups.rule: value_or_draw`` without dynamic sampling: there is no new prompt to draw (it is ``value``);
- ``quantization.upcast_to_float32`` without ``quantization.load_in_4bit``: there is no 4-bit path to upcast;
- ``lora.target_modules``, ``lora.alpha`` or ``lora.dropout`` changed with ``lora.r: 0``: full fine-tuning
  trains every weight and has no adapters to place;
- ``sampler.temperature: 0`` (or ``top_k: 1``): greedy decoding makes the ``group_size`` completions of a prompt
  identical, so their rewards are equal, every advantage is 0 and no step has a gradient, ever.

The shipped configs (``configs/*.yaml``) raise none of them. Warnings, not errors: each setting is valid alone
(a config may keep ``max_prompts`` for runs that turn dynamic sampling on).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any


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
        warnings.warn(f"[infgrpo] {message}", UserWarning, stacklevel=1)
