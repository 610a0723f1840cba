"""Engine: decodes many sequences over a fixed slot pool with continuous refill.

    engine = Engine(model, num_slots=16, max_new_tokens=256, stop_ids=[eos], pad_id=0, temperature=1.0)
    finished, stats = engine.run(prompts, group_size=64, seed=0)

One step reads like a sentence::

    self.admit()                        # refill free slots; new prompts prefilled together
    out = self.step()                   # one static forward + sampling over the whole pool
    self.postprocess(out)               # append, finish, free slots (host bookkeeping only)

Each prompt is prefilled **once** (batched with the other prompts admitted in the same round, see
:mod:`infgrpo.sampler.prefill`), its K/V kept while some of its samples still wait and copied into
every slot that runs one of them; the prefill's last logits give every sample its first token, so a
sample costs no prefill of its own. Micro sampling groups are the special case of a pool smaller
than the group; groups of several prompts interleave in the pool.

The device side of a step (:class:`~infgrpo.sampler.step_runner.DecodeStep`) has one shape for the
whole rollout, reads nothing back but its (2, S) result, and runs as a CUDA graph on CUDA. The host
side keeps the schedule: who runs where (the refill policy, :mod:`infgrpo.sampler.admission`), each
slot's length and stream, stop checks. Sequence j of prompt i samples its t-th token with the
uniform of (seed, prompt_offset + i, j, t) (:mod:`infgrpo.sampler.counter_rng`), so its tokens do
not depend on the slot, the neighbours or the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import PreTrainedModel

from infgrpo.sampler.admission import admit
from infgrpo.sampler.counter_rng import counter_uniform, stream_key
from infgrpo.sampler.prefill import prefill
from infgrpo.sampler.refill import REFILL_POLICIES
from infgrpo.sampler.sequence import Sequence, SequenceStatus
from infgrpo.sampler.slot_pool import PoolCache, SlotPool
from infgrpo.sampler.step_runner import DecodeStep


@dataclass
class PromptState:
    """A prefilled prompt: K/V (2, layers, kv_heads, L, head_dim), first tokens and log-probs, samples left."""

    kv: torch.Tensor
    first_tokens: list[int]
    first_logps: list[float]
    waiting: int


@dataclass
class EngineStats:
    """Counters of one :meth:`Engine.run`: steps, prefills, busy slot-steps, K/V bytes and replans."""

    decode_steps: int = 0
    prefill_tokens: int = 0
    prefill_calls: int = 0
    busy_slot_steps: int = 0
    pool_bytes: int = 0
    prompt_kv_bytes_peak: int = 0
    replans: int = 0
    graph_captures: int = 0
    timeline: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    """(slot, prompt_idx, sample_idx, start_step, end_step) of every sequence."""


class Engine:
    """Slot-pool decoder for one HF causal LM; see the module docstring.

    ``pools`` keeps the slot pool (and its captured step) for the next run; without one, each run
    allocates its own. ``cuda_graphs`` and ``attention`` configure the decode step
    (:class:`~infgrpo.sampler.step_runner.DecodeStep`).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        num_slots: int,
        max_new_tokens: int,
        stop_ids: list[int],
        pad_id: int,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        refill: str = "fifo",
        planner: str = "auto",
        planner_epsilon: float = 0.1,
        pools: PoolCache | None = None,
        cuda_graphs: str = "auto",
        attention: str = "efficient",
    ) -> None:
        self.model = model
        self.num_slots, self.max_new_tokens = num_slots, max_new_tokens
        self.stop_ids = set(stop_ids)
        self.pad_id = pad_id
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.policy_cls = REFILL_POLICIES.get(refill)
        self.planner, self.planner_epsilon = planner, planner_epsilon
        self.pools = pools if pools is not None else PoolCache()
        self.step_settings = (temperature, top_k, top_p, pad_id, cuda_graphs, attention)
        self.device = next(model.parameters()).device

    # -- public -----------------------------------------------------------------------------
    @torch.no_grad()
    def run(
        self,
        prompts: list[list[int]],
        group_size: int,
        seed: int,
        predicted_lengths: list[float] | None = None,
        prompt_offset: int = 0,
    ) -> tuple[list[Sequence], EngineStats]:
        """Decodes ``group_size`` samples of each prompt; returns them prompt-major, and stats.

        ``predicted_lengths`` (one per prompt) order the work for the length-aware refill policies;
        ``prompt_offset`` is added to each prompt's index in its random stream's key (the global
        index of ``prompts[0]`` when a batch is split across ranks).
        """
        # 1) the waiting queue (prompt-major), each sequence with its own random stream
        seqs = [Sequence(p, j) for p in range(len(prompts)) for j in range(group_size)]
        for s in seqs:
            s.key = stream_key(seed, prompt_offset + s.prompt_idx, s.sample_idx)
            if predicted_lengths is not None:
                s.predicted_length = float(predicted_lengths[s.prompt_idx])
        self.prompts, self.group_size = prompts, group_size
        self.by_prompt = [seqs[i * group_size : (i + 1) * group_size] for i in range(len(prompts))]
        self.running: dict[int, Sequence] = {}
        self.prefilled: dict[int, PromptState] = {}
        # 2) a pool no larger than the work, each slot long enough for any prompt + completion
        slots = min(self.num_slots, len(seqs))
        self.dtype = self.kv_dtype()
        positions = max(map(len, prompts)) + self.max_new_tokens
        self.pool = self.pools.get(self.model.config, slots, positions, self.dtype, self.device)
        self.runner = self.decode_step(self.pool)
        self.stats = EngineStats(pool_bytes=self.pool.nbytes())
        self.waiting = self.policy_cls(seqs, slots, planner=self.planner, epsilon=self.planner_epsilon)
        # 3) decode until every sequence finished
        try:
            self.admit()
            while self.running:
                self.postprocess(self.step())
                self.admit()
        finally:
            self.pool = None
            self.prefilled = {}
        self.stats.replans = getattr(self.waiting, "replans", 0)
        self.stats.graph_captures = self.runner.captures
        return seqs, self.stats

    def kv_dtype(self) -> torch.dtype:
        """The dtype the attention layers produce K/V in (the compute dtype, also under 4-bit)."""
        emb = self.model.get_input_embeddings()
        return emb.weight.dtype if emb.weight.is_floating_point() else torch.float32

    def decode_step(self, pool: SlotPool) -> DecodeStep:
        """The pool's decode step for this engine's settings (kept with the pool, so a graph is reused)."""
        runner = pool.runner
        if runner is None or runner.model is not self.model or runner.settings != self.step_settings:
            temperature, top_k, top_p, pad_id, cuda_graphs, attention = self.step_settings
            runner = pool.runner = DecodeStep(
                self.model, pool, temperature, top_k, top_p, pad_id, cuda_graphs, attention
            )
        runner.reset()
        runner.prepare()
        return runner

    # -- the three phases of a step ---------------------------------------------------------
    def admit(self) -> None:
        """Fills free slots (the refill policy picks who runs in each; see :mod:`infgrpo.sampler.admission`)."""
        now = self.stats.decode_steps
        for slot, seq in admit(self.waiting, self.pool.free, now, self.first_tokens, self.finish):
            state = self.prefilled[seq.prompt_idx]
            self.pool.load_prompt(slot, state.kv)
            self.release_prompt(seq.prompt_idx)
            seq.slot, seq.status = slot, SequenceStatus.RUNNING
            self.running[slot] = seq
            self.runner.host[:, slot] = (seq.last_token, len(self.prompts[seq.prompt_idx]), *seq.key, len(seq))

    def step(self) -> np.ndarray:
        """One decode step over the whole pool; returns the (S, 2) host array of tokens and log-probs."""
        out = self.runner()
        self.stats.decode_steps += 1
        self.stats.busy_slot_steps += len(self.running)
        return out

    def postprocess(self, out: np.ndarray) -> None:
        """Appends each running slot's token; finished sequences free their slots (in slot order)."""
        host = self.runner.host
        for slot in sorted(self.running):
            seq = self.running[slot]
            self.append(seq, int(out[slot, 0]), float(out[slot, 1]))
            if seq.status is SequenceStatus.FINISHED:
                del self.running[slot]
                self.pool.deallocate(slot)
                host[:, slot] = (self.pad_id, 0, 0, 0, 0)
                self.finish(seq, slot)
            else:
                host[0, slot] = seq.last_token
                host[1, slot] += 1  # the fed token's K/V now sit at the old position
                host[4, slot] += 1
                self.pool.lengths[slot] += 1

    # -- helpers ----------------------------------------------------------------------------
    def first_tokens(self, batch: list[Sequence]) -> list[bool]:
        """Gives each sequence of ``batch`` its first token (prefilling new prompts together); which ended."""
        todo = sorted({s.prompt_idx for s in batch if s.prompt_idx not in self.prefilled})
        if todo:
            self.prefill(todo)
        ended = []
        for seq in batch:
            state = self.prefilled[seq.prompt_idx]
            self.append(seq, state.first_tokens[seq.sample_idx], state.first_logps[seq.sample_idx])
            seq.start_step = self.stats.decode_steps
            ended.append(seq.status is SequenceStatus.FINISHED)
            if ended[-1]:  # a one-token completion never takes the slot: its prompt may be done with
                self.release_prompt(seq.prompt_idx)
        return ended

    def prefill(self, prompt_indices: list[int]) -> None:
        """Prefills these prompts in one forward; keeps their K/V and all their samples' first tokens."""
        prompts = [self.prompts[i] for i in prompt_indices]
        keys = torch.tensor([[s.key for s in self.by_prompt[i]] for i in prompt_indices])  # (P, G, 2)
        t0 = torch.zeros(keys.shape[:2], dtype=torch.long)
        u_dtype = torch.float64 if self.dtype == torch.float64 else torch.float32
        uniforms = counter_uniform(keys[..., 0], keys[..., 1], t0, u_dtype).to(self.device)  # (P, G)
        kv, tokens, logps = prefill(
            self.model, prompts, uniforms, self.dtype, self.temperature, self.top_k, self.top_p, self.pad_id
        )
        tokens, logps = tokens.cpu().numpy().tolist(), logps.double().cpu().numpy().tolist()  # its read-back
        for k, i in enumerate(prompt_indices):
            self.prefilled[i] = PromptState(kv[k], tokens[k], logps[k], self.group_size)
        self.stats.prefill_tokens += sum(map(len, prompts))
        self.stats.prefill_calls += 1
        held = sum(st.kv.numel() * st.kv.element_size() for st in self.prefilled.values())
        self.stats.prompt_kv_bytes_peak = max(self.stats.prompt_kv_bytes_peak, held)

    def release_prompt(self, prompt_idx: int) -> None:
        """One more sample of the prompt has its first token and a slot (or ended): drops the K/V after the last."""
        state = self.prefilled[prompt_idx]
        state.waiting -= 1
        if state.waiting == 0:
            del self.prefilled[prompt_idx]

    def append(self, seq: Sequence, token: int, logp: float) -> None:
        """Appends a token and its log-prob to ``seq``; finishes it on a stop token or at ``max_new_tokens``."""
        seq.token_ids.append(token)
        seq.logprobs.append(logp)
        if token in self.stop_ids:
            seq.status, seq.finish_reason = SequenceStatus.FINISHED, "stop"
        elif len(seq) >= self.max_new_tokens:
            seq.status, seq.finish_reason = SequenceStatus.FINISHED, "length"

    def finish(self, seq: Sequence, slot: int) -> None:
        """Closes a finished sequence: tells the refill policy, records it on the timeline.

        Its log-probs become a float32 tensor (len(seq),). ``slot`` is the one it was popped for; a one-token
        completion never took it, so its timeline entry has slot -1. (A sequence that ends on its first
        token was already reported to the policy by :func:`~infgrpo.sampler.admission.admit`.)
        """
        seq.end_step = self.stats.decode_steps
        if seq.slot >= 0:
            self.waiting.finished(seq, slot, seq.end_step)
        seq.logprobs = torch.tensor(seq.logprobs, dtype=torch.float32)
        self.stats.timeline.append((seq.slot, seq.prompt_idx, seq.sample_idx, seq.start_step, seq.end_step))
