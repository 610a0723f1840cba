"""ModelRunner: the device side of one rollout -- prefill, the prompt K/V a slot starts from, the decode step.

    runner = ModelRunner(model, pool, step, settings, prompts, groups)
    runner.prefill([0, 2])                  # prompts 0 and 2 in one forward: their K/V, all their samples' first tokens
    token, logp = runner.first_token(seq)   # a sample's first token, from its prompt's prefill
    runner.load(slot, seq)                  # its prompt's K/V into `slot`, and the step starts it there
    out = runner.decode()                   # one static step over the whole pool: (S, 2) tokens, log-probs
    runner.update(running, ended)           # the next step's inputs: running slots advance, ended ones idle

It decides nothing: :class:`~infgrpo.sampler.schedule.scheduler.Scheduler` says which prompts to prefill,
which slot a sequence takes and which prompt K/V are still needed (:meth:`ModelRunner.keep`). The
scheduler's slots are where the pool keeps a sequence unless the step computes only the busy slots
(``decode_width``: 'busy', the default on CPU): then the runner keeps the busy sequences packed at
the front of the pool, in places of its own (a new sequence takes the first free place; a sequence
moves down only into a place nobody took: one K/V copy), so a step computes as many rows as sequences
run, and hands the scheduler each slot's row. A
prefill draws every sample's first token at once from the prompt's last logits, each with its own
uniform (its stream at token 0, :mod:`infgrpo.sampler.engine.counter_rng`), so no sample needs a decode
step or a prefill of its own; those tokens are the prefill's one read-back.

A multi-turn sample back from its tools (:mod:`infgrpo.sampler.engine.turns`) holds no K/V: :meth:`ModelRunner.resume`
prefills the round's resumed samples (prompt + tokens so far, each a row) in one left-padded forward and draws each
one's next token from its last logits, with the uniform of its stream at ``t`` = its model tokens so far; the slot
then starts after its last token, ``t`` counting model tokens only.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel

from infgrpo.sampler.engine.counter_rng import counter_uniform
from infgrpo.sampler.engine.decode_step import DecodeStep, StepSettings
from infgrpo.sampler.engine.finite import check_logprobs
from infgrpo.sampler.engine.prefill import prefill
from infgrpo.sampler.engine.slot_pool import SlotPool
from infgrpo.sampler.schedule.sequence import Sequence


@dataclass
class PromptState:
    """A prefilled prompt: K/V (2, layers, kv_heads, L, head_dim), and the first token and log-prob of each sample
    that waited for it (``first[sample_idx]``)."""

    kv: torch.Tensor
    first: dict[int, tuple[int, float]]


class ModelRunner:
    """Prefill and decode for one rollout over a pool and its step; see the module docstring.

    Args:
        model: the causal LM.
        pool, step: the rollout's slot pool and its decode step (from the pool keeper).
        settings: the sampling settings (also those of the first tokens).
        prompts: the rollout's prompts.
        groups: each prompt's sequences, in sample order (their stream keys seed the first tokens).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        pool: SlotPool,
        step: DecodeStep,
        settings: StepSettings,
        prompts: list[list[int]],
        groups: list[list[Sequence]],
    ) -> None:
        self.model, self.pool, self.step, self.settings = model, pool, step, settings
        self.prompts, self.groups = prompts, groups
        self.prompt_kv: dict[int, PromptState] = {}
        self.resumed: dict[tuple[int, int], PromptState] = {}  # (prompt, sample) -> K/V of a resumed sample, its draw
        self.prefill_tokens = self.prefill_calls = self.prompt_kv_bytes_peak = 0
        self.place = np.arange(pool.num_slots)  # the pool slot of each scheduler slot (the same unless packed)
        self.held: list[int | None] = [None] * pool.num_slots  # the scheduler slot each pool slot holds

    def prefill(self, prompt_indices: list[int]) -> None:
        """Prefills these prompts in one forward; keeps their K/V and the first tokens of their waiting samples."""
        if not prompt_indices:
            return
        prompts = [self.prompts[i] for i in prompt_indices]
        # the samples not started yet: a prompt's whole group at first, an extension's new samples later
        waiting = [[seq for seq in self.groups[i] if not seq.token_ids] for i in prompt_indices]
        width = max(map(len, waiting))
        # (P, K, 2); a row shorter than K repeats its last key (a draw nobody reads)
        keys = torch.tensor([[seq.key for seq in w] + [w[-1].key] * (width - len(w)) for w in waiting])
        t0 = torch.zeros(keys.shape[:2], dtype=torch.long)
        u_dtype = torch.float64 if self.pool.dtype == torch.float64 else torch.float32
        uniforms = counter_uniform(keys[..., 0], keys[..., 1], t0, u_dtype).to(self.pool.kv.device)  # (P, G)
        s = self.settings
        kv, tokens, logps = prefill(
            self.model, prompts, uniforms, self.pool.dtype, s.temperature, s.top_k, s.top_p, s.pad_id
        )
        tokens, logps = tokens.cpu().numpy().tolist(), logps.double().cpu().numpy()  # its read-back
        check_logprobs(logps[:, 0], "the prefill", "prompts")  # a prompt's samples share its row of logits
        logps = logps.tolist()
        for k, (i, w) in enumerate(zip(prompt_indices, waiting, strict=True)):
            first = {seq.sample_idx: (tokens[k][j], logps[k][j]) for j, seq in enumerate(w)}
            self.prompt_kv[i] = PromptState(kv[k], first)
        self.prefilled(prompts)

    def resume(self, seqs: list[Sequence]) -> None:
        """Prefills resumed samples (prompt + tokens so far, one row each) in one forward; keeps their K/V and draws
        each one's next token from its last logits at ``t`` = its model tokens so far."""
        if not seqs:
            return
        rows = [self.prompts[seq.prompt_idx] + seq.token_ids for seq in seqs]
        keys = torch.tensor([seq.key for seq in seqs])  # (P, 2)
        t = torch.tensor([[seq.model_tokens] for seq in seqs])  # (P, 1)
        u_dtype = torch.float64 if self.pool.dtype == torch.float64 else torch.float32
        uniforms = counter_uniform(keys[:, :1], keys[:, 1:], t, u_dtype).to(self.pool.kv.device)  # (P, 1)
        s = self.settings
        kv, tokens, logps = prefill(
            self.model, rows, uniforms, self.pool.dtype, s.temperature, s.top_k, s.top_p, s.pad_id
        )
        tokens, logps = tokens[:, 0].cpu().numpy().tolist(), logps[:, 0].double().cpu().numpy()
        check_logprobs(logps, "the prefill", "resumed samples")
        for seq, k, token, logp in zip(seqs, kv, tokens, logps.tolist(), strict=True):
            self.resumed[seq.prompt_idx, seq.sample_idx] = PromptState(k, {seq.sample_idx: (token, logp)})
        self.prefilled(rows)

    def prefilled(self, rows: list[list[int]]) -> None:
        """Counts a prefill of ``rows`` and the K/V held after it."""
        self.prefill_tokens += sum(map(len, rows))
        self.prefill_calls += 1
        held = sum(st.kv.numel() * st.kv.element_size() for st in self.prompt_kv.values())
        if self.resumed:
            held += sum(st.kv.numel() * st.kv.element_size() for st in self.resumed.values())
        self.prompt_kv_bytes_peak = max(self.prompt_kv_bytes_peak, held)

    def state(self, seq: Sequence) -> PromptState:
        """The prefill ``seq`` starts from: its prompt's, or a resumed sample's own."""
        return self.resumed[seq.prompt_idx, seq.sample_idx] if seq.turns else self.prompt_kv[seq.prompt_idx]

    def first_token(self, seq: Sequence) -> tuple[int, float]:
        """``seq``'s first token and its log-prob, drawn by its prompt's prefill (a resumed sample: its next token,
        drawn by its own)."""
        return self.state(seq).first[seq.sample_idx]

    def keep(self, prompts: Container[int]) -> None:
        """Drops the prefilled K/V of every prompt not in ``prompts`` (the scheduler's ``held``)."""
        self.prompt_kv = {i: st for i, st in self.prompt_kv.items() if i in prompts}

    def drop_resumed(self, seqs: Iterable[Sequence] | None = None) -> None:
        """Drops the K/V of these resumed samples (ended on their first token), or of all (loaded into their slots:
        after an admission)."""
        if seqs is None:
            self.resumed.clear()
        for seq in seqs or ():
            self.resumed.pop((seq.prompt_idx, seq.sample_idx), None)

    def load(self, slot: int, seq: Sequence) -> None:
        """Copies ``seq``'s prompt K/V (a resumed sample: its own) into ``slot`` (packed: the first free pool slot);
        the step feeds its last token after them and samples its next model token."""
        place = self.held.index(None) if self.step.busy_width else slot
        self.place[slot], self.held[place] = place, slot
        self.pool.load_prompt(place, self.state(seq).kv)
        position = len(self.prompts[seq.prompt_idx]) + len(seq) - 1  # the last token's; a new sample: the first's
        self.step.start(place, seq.last_token, position, seq.key, seq.model_tokens)

    def decode(self) -> np.ndarray:
        """One decode step: the (S, 2) host array of every scheduler slot's token and log-prob (rows of
        idle slots are stale)."""
        if self.step.busy_width:
            self.step.set_busy(self.pack())  # after the admissions: a slot refilled at once needs no move
        out = self.step()
        return out[self.place] if self.step.busy_width else out

    def update(self, running: dict[int, Sequence], ended: list[int]) -> None:
        """After a step: each running slot feeds its last token one position further; the ``ended`` slots
        idle (packed: new sequences take them first, the next step moves busy slots down into the rest)."""
        for slot in ended:
            self.step.idle(self.place[slot])
            self.held[self.place[slot]] = None
        for slot, seq in running.items():
            self.step.advance(self.place[slot], seq.last_token)

    def pack(self) -> int:
        """Moves the busy pool slots past the first free ones into them, last first; returns n, the busy
        slots (``0 .. n - 1`` after it)."""
        busy = len(self.held) - self.held.count(None)
        holes = [p for p in range(busy) if self.held[p] is None]
        tail = [p for p in range(len(self.held) - 1, busy - 1, -1) if self.held[p] is not None]
        for dst, src in zip(holes, tail, strict=True):
            self.step.move(src, dst)
            slot = self.held[src]
            self.held[dst], self.held[src], self.place[slot] = slot, None, dst
        return busy
