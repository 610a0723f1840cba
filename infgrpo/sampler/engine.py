"""Engine: decodes many sequences over a fixed slot pool with continuous refill.

    engine = Engine(model, num_slots=16, max_new_tokens=256, stop_ids=[eos], temperature=1.0)
    finished = engine.run(prompts, group_size=64, seed=0)

One step reads like a sentence::

    self.admit()                        # refill every free slot from the waiting queue
    logits = self.decode_step()         # one batched forward over the pool
    self.postprocess(logits)            # sample, append, finish, free slots

Each prompt is prefilled **once** (its K/V kept while some of its samples still wait) and copied
into every slot that runs one of its samples; the prompt's last logits give each sample its first
token, so a sample costs no prefill of its own. Micro sampling groups are the special case of a
pool smaller than the group; groups of several prompts interleave in the pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from infgrpo.sampler.refill import REFILL_POLICIES
from infgrpo.sampler.sampling import derive_seed, sample_tokens
from infgrpo.sampler.sequence import Sequence, SequenceStatus
from infgrpo.sampler.slot_pool import SlotPool


@dataclass
class PromptState:
    """A prefilled prompt: per-layer K/V (kv_heads, L, head_dim), its last logits (V,), samples left."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    last_logits: torch.Tensor
    waiting: int


@dataclass
class EngineStats:
    """Counters of one :meth:`Engine.run`: steps, prefilled tokens, busy slot-steps, K/V bytes and replans."""

    decode_steps: int = 0
    prefill_tokens: int = 0
    busy_slot_steps: int = 0
    pool_bytes: int = 0
    prompt_kv_bytes_peak: int = 0
    replans: int = 0
    timeline: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    """(slot, prompt_idx, sample_idx, start_step, end_step) of every sequence."""


class Engine:
    """Slot-pool decoder for one HF causal LM; see the module docstring."""

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
    ) -> None:
        self.model = model
        self.num_slots, self.max_new_tokens = num_slots, max_new_tokens
        self.stop_ids = set(stop_ids)
        self.pad_id = pad_id
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.policy_cls = REFILL_POLICIES.get(refill)
        self.planner, self.planner_epsilon = planner, planner_epsilon
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
        ``prompt_offset`` is added to each prompt's index in its random stream's seed (the global
        index of ``prompts[0]`` when a batch is split across ranks).
        """
        # 1) the waiting queue (prompt-major), each sequence with its own random stream
        seqs = [Sequence(p, j) for p in range(len(prompts)) for j in range(group_size)]
        if predicted_lengths is not None:
            for s in seqs:
                s.predicted_length = float(predicted_lengths[s.prompt_idx])
        self.prompt_offset = prompt_offset
        self.seed = seed
        self.gen_device = self.device if self.device.type == "cuda" else torch.device("cpu")
        self.prompts = prompts
        self.running: dict[int, Sequence] = {}
        self.prefilled: dict[int, PromptState] = {}
        self.group_size = group_size
        # 2) a pool no larger than the work, each slot long enough for any prompt + completion
        slots = min(self.num_slots, len(seqs))
        max_len = max(map(len, prompts)) + self.max_new_tokens
        self.dtype = self.kv_dtype()
        self.pool = SlotPool(self.model.config, slots, max_len, self.dtype, self.device)
        self.stats = EngineStats(pool_bytes=self.pool.nbytes())
        self.waiting = self.policy_cls(seqs, slots, planner=self.planner, epsilon=self.planner_epsilon)
        self.inputs = torch.full((slots, 1), self.pad_id, dtype=torch.long, device=self.device)
        # 3) decode until every sequence finished
        self.admit()
        while self.running:
            logits = self.decode_step()
            self.postprocess(logits)
            self.admit()
        self.pool = None  # release the K/V
        self.stats.replans = getattr(self.waiting, "replans", 0)
        return seqs, self.stats

    def kv_dtype(self) -> torch.dtype:
        """The dtype the attention layers produce K/V in (the compute dtype, also under 4-bit)."""
        emb = self.model.get_input_embeddings()
        return emb.weight.dtype if emb.weight.is_floating_point() else torch.float32

    # -- the three phases of a step ---------------------------------------------------------
    def admit(self) -> None:
        """Fills free slots; the refill policy picks which waiting sequence runs in each."""
        idle = []  # slots the policy leaves empty for now
        while len(self.waiting) and self.pool.can_allocate():
            slot = self.pool.allocate()
            while len(self.waiting):
                seq = self.waiting.pop(slot, self.stats.decode_steps)
                if seq is None:
                    idle.append(slot)
                    break
                state = self.prefill(seq.prompt_idx)
                # its random stream exists only while it runs (a generator's state is ~5 KB)
                seq.generator = torch.Generator(device=self.gen_device).manual_seed(
                    derive_seed(self.seed, self.prompt_offset + seq.prompt_idx, seq.sample_idx)
                )
                # the first token comes from the prompt's last logits: no decode step needed for it
                token, logp = self.sample(state.last_logits[None], [seq.generator])
                self.append(seq, int(token), float(logp))
                state.waiting -= 1
                if state.waiting == 0:
                    del self.prefilled[seq.prompt_idx]
                seq.start_step = self.stats.decode_steps
                if seq.status is SequenceStatus.FINISHED:  # a one-token completion never takes the slot
                    self.finish(seq, slot)
                    continue
                self.pool.load_prompt(slot, state.kv)
                seq.slot, seq.status = slot, SequenceStatus.RUNNING
                self.running[slot] = seq
                self.inputs[slot, 0] = token
                break
            else:  # nothing left to run in it
                self.pool.deallocate(slot)
        for slot in reversed(idle):  # back on the free stack in the order they came off it
            self.pool.deallocate(slot)

    def decode_step(self) -> torch.Tensor:
        """One batched forward over every slot; returns logits (S, V) of the running ones' next token."""
        pool = self.pool
        window = max(len(self.prompts[s.prompt_idx]) + len(s) for s in self.running.values())
        mask = pool.attention_mask(self.dtype, window)  # (S, 1, 1, window)
        out = self.model(
            input_ids=self.inputs,
            position_ids=pool.lengths.unsqueeze(1),
            attention_mask=mask,
            cache=pool,
            use_cache=True,
        )
        running = torch.tensor(sorted(self.running), device=self.device)
        pool.lengths[running] += 1  # the step's token now sits in the cache
        self.stats.decode_steps += 1
        self.stats.busy_slot_steps += len(self.running)
        return out.logits[:, -1]

    def postprocess(self, logits: torch.Tensor) -> None:
        """Samples each running sequence's next token; finished sequences free their slots."""
        slots = sorted(self.running)
        seqs = [self.running[s] for s in slots]
        if len(slots) < logits.shape[0]:  # idle slots: keep the running rows only
            logits = logits[torch.tensor(slots, device=logits.device)]
        tokens, logps = self.sample(logits, [s.generator for s in seqs])
        for slot, seq, tok, lp in zip(slots, seqs, tokens.tolist(), logps.tolist(), strict=True):
            self.append(seq, tok, lp)
            if seq.status is SequenceStatus.FINISHED:
                del self.running[slot]
                self.pool.deallocate(slot)
                self.inputs[slot, 0] = self.pad_id
                self.finish(seq, slot)
            else:
                self.inputs[slot, 0] = tok

    # -- helpers ----------------------------------------------------------------------------
    def prefill(self, prompt_idx: int) -> PromptState:
        """The prompt's K/V and last logits, computed once per prompt and run."""
        if prompt_idx in self.prefilled:
            return self.prefilled[prompt_idx]
        ids = torch.tensor([self.prompts[prompt_idx]], device=self.device)
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
        kv = [(layer.keys[0], layer.values[0]) for layer in out.cache.layers]
        state = PromptState(kv, out.logits[0, -1], self.group_size)
        self.prefilled[prompt_idx] = state
        self.stats.prefill_tokens += ids.shape[1]
        held = sum(k.numel() * k.element_size() * 2 for st in self.prefilled.values() for k, _ in st.kv)
        self.stats.prompt_kv_bytes_peak = max(self.stats.prompt_kv_bytes_peak, held)
        return state

    def sample(self, logits: torch.Tensor, generators: list[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
        """Next tokens (A,) and their log-probs (A,) from logits (A, V), row i drawn from ``generators[i]``.

        Uses the engine's temperature, top-k and top-p (:func:`~infgrpo.sampler.sampling.sample_tokens`).
        """
        return sample_tokens(logits, generators, self.temperature, self.top_k, self.top_p)

    def append(self, seq: Sequence, token: int, logp: float) -> None:
        """Appends a token and its log-prob to ``seq``; finishes it on a stop token or at ``max_new_tokens``."""
        seq.token_ids.append(token)
        seq.logprobs.append(logp)
        if token in self.stop_ids:
            seq.status, seq.finish_reason = SequenceStatus.FINISHED, "stop"
        elif len(seq) >= self.max_new_tokens:
            seq.status, seq.finish_reason = SequenceStatus.FINISHED, "length"

    def finish(self, seq: Sequence, slot: int) -> None:
        """Closes a finished sequence: tells the refill policy, drops its generator, records it on the timeline.

        Its log-probs become a float32 tensor (len(seq),). ``slot`` is the one it was popped for; a one-token
        completion never took it, so its timeline entry has slot -1.
        """
        seq.end_step = self.stats.decode_steps
        self.waiting.finished(seq, slot, seq.end_step)
        seq.generator = None
        seq.logprobs = torch.tensor(seq.logprobs, dtype=torch.float32)
        self.stats.timeline.append((seq.slot, seq.prompt_idx, seq.sample_idx, seq.start_step, seq.end_step))
