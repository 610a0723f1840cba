"""What an HF decoder is asked for: one rollout's prompts, group, pool, random streams and ``generate`` arguments.

    rollouts = BASELINES.get("hf_micro")(model, DecodeRequest(prompt_ids, group_size, num_slots, seed, 0, kw, kv))

Every decoder of :data:`~infgrpo.sampler.hf.baselines.BASELINES` is called as ``decode(model, request)``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DecodeRequest:
    """One rollout for an HF decoder: ``group_size`` completions of each of ``prompt_ids``, prompt-major."""

    prompt_ids: list[list[int]]
    """The prompts (token ids)."""
    group_size: int
    """Completions per prompt."""
    num_slots: int
    """Sequences decoded at once (a decoder with ``whole_group`` is passed the group size)."""
    seed: int
    """The rollout's seed; each decoder derives its random streams from it."""
    prompt_offset: int
    """The global index of ``prompt_ids[0]`` (its random streams are those of that prompt)."""
    gen_kwargs: dict
    """Keyword arguments of ``generate`` (:func:`~infgrpo.sampler.hf.baselines.generation_kwargs`)."""
    kv_bytes_per_token: int
    """K/V bytes one token holds in the cache (for the ``kv_bytes_peak`` statistic)."""
