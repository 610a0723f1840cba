"""SamplerConfig: how completions are decoded during a rollout."""

from __future__ import annotations

from dataclasses import dataclass, field

DECODERS = ("engine", "micro_groups", "hf_micro", "hf_full")
REFILL_POLICIES = ("fifo",)
PLANNERS = ("none",)


@dataclass
class SamplerConfig:
    """Decoding settings of :class:`~infgrpo.MicroGroupSampler`.

    Memory of a rollout is bounded by ``num_slots`` sequences decoded at once, whatever the group
    size: a group of G completions runs as ceil(G / num_slots) micro-groups that reuse one prefilled
    prompt KV cache.
    """

    num_slots: int = 8
    """Sequences decoded at once (the KV slot pool; the micro-group size of the HF decoders). Peak
    rollout memory grows with it, not with the group size; fewer slots cost more decode steps.
    Must be >= 1."""
    max_new_tokens: int = 128
    """Most tokens generated per completion (> 0); longer completions end with reason 'length'."""
    temperature: float = 1.0
    """Sampling temperature (> 0 samples; 0 decodes greedily)."""
    top_k: int = 0
    """Keep only the k most likely tokens (0 = off)."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens with this much probability (0 < top_p <= 1)."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Extra token ids that end a completion, besides the tokenizer's EOS."""
    decoder: str = "engine"
    """'engine' (slot pool: prompt prefilled once, finished slots refilled at once), 'micro_groups'
    (HF generate round by round over one prefilled prompt cache), 'hf_micro' (baseline: HF generate
    round by round, prompt prefilled every round) or 'hf_full' (baseline: HF generate over the whole
    group at once; memory grows with the group size)."""
    refill: str = "fifo"
    """Which pending sequence takes a free slot. Valid now: 'fifo'."""
    planner: str = "none"
    """Global assignment of sequences to slots. Valid now: 'none'."""

    def __post_init__(self) -> None:
        if not isinstance(self.num_slots, int) or self.num_slots < 1:
            raise ValueError(f"num_slots={self.num_slots!r} must be an integer >= 1")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens={self.max_new_tokens!r} must be an integer > 0")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature!r} must be >= 0 (0 = greedy)")
        if self.top_k < 0:
            raise ValueError(f"top_k={self.top_k!r} must be >= 0 (0 = off)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p!r} must be in (0, 1]")
        for name, value, valid in (
            ("decoder", self.decoder, DECODERS),
            ("refill", self.refill, REFILL_POLICIES),
            ("planner", self.planner, PLANNERS),
        ):
            if value not in valid:
                raise ValueError(f"{name}={value!r} is not known; valid: {', '.join(valid)}")
