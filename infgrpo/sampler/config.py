"""SamplerConfig: how completions are decoded during a rollout.

The choices of each setting are the ``Literal`` declared beside its implementation (decoders in
``baselines``, refill policies in ``refill``, planners in ``planner``, length predictors in
``length_predictor``, graphs and kernels in ``decode_step``): the field's type, ``--help`` and the
error for an unknown name all read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from infgrpo.runtime.memory import parse_memory
from infgrpo.sampler.engine.decode_step import CudaGraphs, DecodeAttention, DecodeWidth, check_graph_width
from infgrpo.sampler.hf.baselines import Decoder
from infgrpo.sampler.schedule.length_predictor import LengthPrediction
from infgrpo.sampler.schedule.planner import Planner
from infgrpo.sampler.schedule.refill import Refill
from infgrpo.settings import ConfigError, check_types

JUDGED = {
    "adaptive_groups": "groups grow inside the slot pool",
    "dynamic_sampling": "groups are judged and replaced inside the slot pool as they end",
}
"""The settings whose groups the engine judges as they end, and why that needs decoder ``engine``."""
ENGINE_ONLY = {
    **{key: (f"{key}.enabled", why, f"{key}.enabled: false") for key, why in JUDGED.items()},
    "agent": ("agent.tools or agent.environment", "a sample leaves the slot pool while its tools run",
              "no agent.tools and no agent.environment"),
}  # fmt: skip
"""Key -> (the setting, why it needs decoder ``engine``, how to turn it off): what :meth:`SamplerConfig.require_engine`
names."""


@dataclass
class SamplerConfig:
    """Decoding settings of :class:`~infgrpo.MicroGroupSampler`.

    Memory of a rollout is bounded by ``num_slots`` sequences decoded at once, whatever the group
    size: a group of G completions runs as ceil(G / num_slots) micro-groups that reuse one prefilled
    prompt KV cache.
    """

    num_slots: int | Literal["auto"] = 8
    """Sequences decoded at once (the KV slot pool; the micro-group size of the HF decoders). Peak
    rollout memory grows with it, not with the group size; fewer slots cost more decode steps.
    An integer >= 1, or 'auto': as many as ``rollout_memory`` holds, planned for each rollout (K/V
    of its longest prompt + max_new_tokens per slot, plus the decode step's vocabulary-sized
    workspace; see infgrpo.sampler.pool_sizing). A rollout that runs out of device memory is retried
    with half the slots (the completions are the same), and later rollouts keep the count that fit."""
    rollout_memory: int | float | str = 0.5
    """Memory budget of the rollout when ``num_slots`` is 'auto': bytes (an integer, or a string
    such as '4GB' or '512MiB'), or a float in (0, 1]: that share of the device memory free when the
    first rollout starts (on CPU: available system memory). Ignored for an integer ``num_slots``."""
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
    decoder: Decoder = "engine"
    """'engine' (slot pool: prompt prefilled once, finished slots refilled at once), 'micro_groups'
    (HF generate round by round over one prefilled prompt cache), 'hf_micro' (baseline: HF generate
    round by round, prompt prefilled every round), 'hf_full' (baseline: HF generate over the whole
    group at once; memory grows with the group size) or 'hf_cb' (peer: transformers' continuous
    batching, generate_batch, with num_slots sequences a forward and K/V for num_slots sequences; its
    log-probs are taken after top-k / top-p filtering, the others' before, and its completions depend
    on the schedule: num_slots and the other prompts change them)."""
    refill: Refill = "lpt"
    """Which waiting sequence takes a free slot: 'fifo' (prompt-major order), 'sjf' (shortest
    predicted first, the paper's), 'lpt' (longest predicted first) or 'planned' (follow the
    planner's global assignment, re-planning when a prediction proves wrong). The policy changes the
    order of work only, never the completions."""
    planner: Planner = "auto"
    """Global assignment used by ``refill='planned'``: 'fptas' ((1 + planner_epsilon)-approximate,
    polynomial in the sequences and in 1 / epsilon for few slots), 'lpt' (longest
    first + local improvement, any size) or 'auto' (fptas where it is tractable, else lpt)."""
    planner_epsilon: float = 0.1
    """Approximation slack of the 'fptas' planner (> 0): its makespan is within (1 + epsilon) of
    the optimum for the predicted lengths."""
    length_predictor: LengthPrediction = "learned"
    """How completion lengths are predicted for the length-aware policies: 'learned' (a ridge head
    on the policy's hidden state at the prompt's end, learned online from finished rollouts, blended
    with each prompt's own history), 'history' (per-prompt history only) or 'none' (no prediction:
    every policy then runs in prompt-major order)."""

    cuda_graphs: CudaGraphs = "auto"
    """Run the engine's decode step as a captured CUDA graph: 'auto' (on CUDA devices; if capture fails,
    eager with one warning), 'on' (error if it cannot be captured) or 'off'. A graph replays the step
    (forward + sampling over every slot) in one launch; it is recaptured when parameters move to other
    storage or peft adapters are toggled. CPU runs the same static step eagerly."""
    decode_attention: DecodeAttention = "efficient"
    """SDPA kernel of the engine's decode step on CUDA: 'efficient' (memory-efficient attention: takes the
    slot pool's additive mask, no per-shape planning), 'cudnn', 'math', or 'auto' (PyTorch's choice).
    Ignored on CPU."""
    decode_width: DecodeWidth = "auto"
    """Rows the engine's decode step computes: 'pool' (every slot, finished or not: one shape, what a
    CUDA graph replays), 'busy' (only the slots that hold a running sequence, kept at the front of the
    pool: when one ends, the last busy one moves into its slot, one K/V copy; at least 8 rows) or
    'auto' ('pool' on CUDA, 'busy' elsewhere: a CPU's step costs what its rows cost, and the tail of a
    rollout runs few). The completions are the same either way."""
    keep_pool: bool | Literal["auto"] = "auto"
    """Keep the KV slot pool (and its CUDA graph) allocated between rollouts, re-allocating only when a
    rollout needs more positions or another slot count. False frees it after each rollout, which gives
    its memory to the policy update at the cost of allocating (and capturing) again every rollout.
    'auto': kept on CUDA (a captured graph replays on the same pool), freed elsewhere (a CPU captures
    nothing, and allocating the pool costs little next to the rollout)."""

    def __post_init__(self) -> None:
        if self.num_slots != "auto" and (
            isinstance(self.num_slots, bool) or not isinstance(self.num_slots, int) or self.num_slots < 1
        ):
            raise ConfigError(f"num_slots={self.num_slots!r} must be an integer >= 1 or 'auto'")
        parse_memory(self.rollout_memory, "rollout_memory")
        if not isinstance(self.keep_pool, bool) and self.keep_pool != "auto":
            raise ConfigError(f"keep_pool={self.keep_pool!r} must be true, false or 'auto' (kept on CUDA only)")
        check_types(self)  # before any comparison: SamplerConfig(temperature="1.0") names the field
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens <= 0:
            raise ConfigError(f"max_new_tokens={self.max_new_tokens!r} must be an integer > 0")
        if self.temperature < 0:
            raise ConfigError(f"temperature={self.temperature!r} must be >= 0 (0 = greedy)")
        if self.top_k < 0:
            raise ConfigError(f"top_k={self.top_k!r} must be >= 0 (0 = off)")
        if not self.planner_epsilon > 0:
            raise ConfigError(f"planner_epsilon={self.planner_epsilon!r} must be > 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p={self.top_p!r} must be in (0, 1]")
        check_graph_width(self.cuda_graphs, self.decode_width)  # 'auto' is 'pool' where graphs run

    def require_engine(self, key: str) -> None:
        """A ConfigError naming the setting of ``key`` (a key of :data:`ENGINE_ONLY`: ``<key>.enabled`` for those of
        :data:`JUDGED`; ``agent``: tools) unless ``decoder`` is ``engine``: the baseline decoders return whole groups
        at the end of a rollout."""
        if self.decoder != "engine":
            setting, why, off = ENGINE_ONLY[key]
            raise ConfigError(
                f"{setting} needs sampler.decoder='engine' ({why}); got {self.decoder!r}: set "
                f"sampler.decoder: engine, or {off} for a baseline decoder"
            )
