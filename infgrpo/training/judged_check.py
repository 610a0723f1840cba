"""The settings of a judged rollout (dynamic sampling, adaptive groups, or both), checked before anything loads.

    check_judged_rollout(built, group_size)   # built: the settings groups by key (infgrpo.training.hparams)

Both judge each group the moment its last sample ends, inside the slot-pool engine
(:mod:`infgrpo.sampler.engine.dynamic`, :mod:`infgrpo.sampler.engine.adaptive`); the baseline decoders
(``micro_groups``, ``hf_micro``, ``hf_full``, ``hf_cb``) return whole groups at the end of a rollout, so either
setting with one of them would fail in the first training step. One function refuses both the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infgrpo.settings import ConfigError

WHY = {
    "adaptive_groups": "groups grow inside the slot pool",
    "dynamic_sampling": "groups are judged and replaced inside the slot pool as they end",
}


def check_judged_rollout(built: Mapping[str, Any], group_size: int) -> None:
    """Raises a ConfigError naming ``<group>.enabled`` when dynamic sampling or adaptive groups are on with a
    decoder other than ``engine``; adaptive groups also need their first group to fit and, with dynamic sampling,
    the continuous scheme."""
    decoder = built["sampler"].decoder
    for key in ("adaptive_groups", "dynamic_sampling"):
        if built[key].enabled and decoder != "engine":
            raise ConfigError(
                f"{key}.enabled needs sampler.decoder='engine' ({WHY[key]}); got {decoder!r}: set "
                f"sampler.decoder: engine, or {key}.enabled: false for a baseline decoder"
            )
    adaptive = built["adaptive_groups"]
    if not adaptive.enabled:
        return
    adaptive.check(group_size)
    if built["dynamic_sampling"].enabled and built["dynamic_sampling"].scheme != "continuous":
        raise ConfigError(
            "adaptive_groups.enabled with dynamic_sampling needs dynamic_sampling.scheme='continuous' (groups "
            f"grow while prompts are drawn); got {built['dynamic_sampling'].scheme!r}"
        )
