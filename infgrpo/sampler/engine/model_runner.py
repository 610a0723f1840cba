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

A multi-turn sample back from its tools (:mod:`infgrpo.sampler.engine.turns`) holds no K/V of its own:
:meth:`ModelRunner.resume` prefills the round's resumed samples in one forward and draws each one's next token from
its last logits, with the uniform of its stream at ``t`` = its model tokens so far; the slot then starts after its
last token, ``t`` counting model tokens only. What it prefills is the least the memory bound allows:

1. its own K/V: when a sample leaves for its tools, :meth:`ModelRunner.park` copies its K/V (prompt and every token
   but the last, out of its slot or its prefill) while the parked K/V of all waiting samples stay within the pool's
   own size (``num_slots`` x the pool's width); the resume then prefills its last token and the tool results only;
2. else its prompt's: while some sample of a prompt has not finished, the prompt's prefilled K/V are kept
   (:meth:`ModelRunner.keep`: at most ``num_slots`` prompts kept for that alone); the resume prefills its completion
   and tool results on top (:func:`~infgrpo.sampler.engine.prefill.prefill_after`);
3. else prompt + tokens so far, as a row of a forward of its own.

So the K/V a rollout holds stay bounded by ``num_slots`` whatever the group size, the turns or the tools' latency:
the pool, the prompts some new sample needs, at most ``num_slots`` prompts kept for resumes and at most a pool's
worth of parked K/V.

**Images** (``visions``: each prompt's :class:`~infgrpo.vision.inputs.VisionInputs`, or None): a prompt's images go
through the vision tower in its one prefill, and its rotary delta (M-RoPE: :mod:`infgrpo.vision.positions`) is kept
for the rollout (:attr:`ModelRunner.deltas`, an int per prompt): every slot that runs one of its samples, and every
resume, continues at cache position + delta. A resume on kept or parked K/V feeds text only; one that prefills prompt
+ tokens again passes the prompt's images again (its token types extended over the tokens).
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
from infgrpo.sampler.engine.prefill import prefill, prefill_after
from infgrpo.sampler.engine.slot_pool import SlotPool
from infgrpo.sampler.schedule.sequence import Sequence
from infgrpo.vision.inputs import VisionInputs, extended


@dataclass
class PromptState:
    """A prefilled prompt: K/V (2, layers, kv_heads, L, head_dim), and the first token and log-prob of each sample
    that waited for it (``first[sample_idx]``)."""

    kv: torch.Tensor
    first: dict[int, tuple[int, float]]


class ModelRunner:
    """Prefill and decode for one rollout over a pool and its step; see the module docstring.

    ``resume_on_prompt`` (a class attribute): whether resumed samples prefill on their prompt's kept K/V; False
    prefills prompt + tokens so far for each, and keeps no prompt K/V for resumes (the behaviour before issue 59,
    the agent benchmark's baseline).

    Args:
        model: the causal LM.
        pool, step: the rollout's slot pool and its decode step (from the pool keeper).
        settings: the sampling settings (also those of the first tokens).
        prompts: the rollout's prompts.
        groups: each prompt's sequences, in sample order (their stream keys seed the first tokens).
        visions: each prompt's images (a vision-language model), by prompt index; None: text prompts.
    """

    resume_on_prompt: bool = True

    def __init__(
        self,
        model: PreTrainedModel,
        pool: SlotPool,
        step: DecodeStep,
        settings: StepSettings,
        prompts: list[list[int]],
        groups: list[list[Sequence]],
        visions: list[VisionInputs | None] | None = None,
    ) -> None:
        self.model, self.pool, self.step, self.settings = model, pool, step, settings
        self.prompts, self.groups, self.visions = prompts, groups, visions
        self.deltas: dict[int, int] = {}
        """Each prefilled prompt's rotary delta (M-RoPE prompts with images; else 0), kept for the rollout."""
        self.banned = step.banned  # the image placeholders of a vision-language model (never drawn), or None
        self.prompt_kv: dict[int, PromptState] = {}
        self.kept_for_resume = pool.num_slots if self.resume_on_prompt else 0
        """The most prompts whose K/V are kept only for resumed samples (beyond those some new sample needs)."""
        self.parked: dict[tuple[int, int], torch.Tensor] = {}  # (prompt, sample) -> its K/V while it waits
        self.park_budget = pool.num_slots * pool.max_len if self.resume_on_prompt else 0
        """The most positions of K/V parked for waiting samples at once: the pool's own size."""
        self.parked_tokens = 0
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
        visions = [self.visions[i] for i in prompt_indices] if self.visions is not None else None
        kv, tokens, logps, deltas = prefill(
            self.model, prompts, uniforms, self.pool.dtype, s.temperature, s.top_k, s.top_p, s.pad_id, visions,
            self.banned,
        )  # fmt: skip
        self.deltas.update(zip(prompt_indices, deltas, strict=True))
        tokens, logps = tokens.cpu().numpy().tolist(), logps.double().cpu().numpy()  # its read-back
        check_logprobs(logps[:, 0], "the prefill", "prompts")  # a prompt's samples share its row of logits
        logps = logps.tolist()
        for k, (i, w) in enumerate(zip(prompt_indices, waiting, strict=True)):
            first = {seq.sample_idx: (tokens[k][j], logps[k][j]) for j, seq in enumerate(w)}
            self.prompt_kv[i] = PromptState(kv[k], first)
        self.prefilled(prompts)

    def resume(self, seqs: list[Sequence]) -> None:
        """Prefills resumed samples, at most two forwards: those with K/V to build on (their own, parked; else their
        prompt's, kept) prefill the rest of prompt + tokens so far on top of them, the others all of it, one row
        each; keeps their K/V and draws each one's next token from its last logits at ``t`` = its model tokens so
        far."""
        kept = self.prompt_kv if self.resume_on_prompt else {}
        on, alone = [], []  # (sample, the K/V it builds on), (sample, None)
        for seq in seqs:
            prefix = self.unpark(seq)
            if prefix is None and seq.prompt_idx in kept:
                prefix = kept[seq.prompt_idx].kv
            (on if prefix is not None else alone).append((seq, prefix))
        for group in (on, alone):
            if group:
                self._resume_rows(group)

    def _resume_rows(self, group: list[tuple[Sequence, torch.Tensor | None]]) -> None:
        """One forward of resumed samples: after their prefixes' K/V when given (:func:`prefill_after`), else
        alone (:func:`prefill`)."""
        seqs = [seq for seq, _ in group]
        rows = [self.prompts[seq.prompt_idx] + seq.token_ids for seq in seqs]
        keys = torch.tensor([seq.key for seq in seqs])  # (P, 2)
        t = torch.tensor([[seq.model_tokens] for seq in seqs])  # (P, 1)
        u_dtype = torch.float64 if self.pool.dtype == torch.float64 else torch.float32
        uniforms = counter_uniform(keys[:, :1], keys[:, 1:], t, u_dtype).to(self.pool.kv.device)  # (P, 1)
        s = self.settings
        if group[0][1] is not None:
            prefixes = [prefix for _, prefix in group]
            rows = [row[prefix.shape[3] :] for row, prefix in zip(rows, prefixes, strict=True)]  # the rest only
            deltas = [self.deltas.get(seq.prompt_idx, 0) for seq in seqs]  # text after the prompt: its delta
            kv, tokens, logps = prefill_after(
                self.model, prefixes, rows, uniforms, self.pool.dtype, s.temperature, s.top_k, s.top_p, s.pad_id,
                deltas, self.banned,
            )  # fmt: skip
        else:  # prompt + tokens so far: the prompt's images again, its token types extended over the tokens
            visions = None
            if self.visions is not None:
                visions = [extended(self.visions[seq.prompt_idx], len(seq.token_ids)) for seq in seqs]
            kv, tokens, logps, _ = prefill(
                self.model, rows, uniforms, self.pool.dtype, s.temperature, s.top_k, s.top_p, s.pad_id, visions,
                self.banned,
            )  # fmt: skip
        tokens, logps = tokens[:, 0].cpu().numpy().tolist(), logps[:, 0].double().cpu().numpy()
        check_logprobs(logps, "the prefill", "resumed samples")
        for seq, k, token, logp in zip(seqs, kv, tokens, logps.tolist(), strict=True):
            self.resumed[seq.prompt_idx, seq.sample_idx] = PromptState(k, {seq.sample_idx: (token, logp)})
        self.prefilled(rows)

    def prefilled(self, rows: list[list[int]]) -> None:
        """Counts a prefill of ``rows`` and the K/V held after it."""
        self.prefill_tokens += sum(map(len, rows))
        self.prefill_calls += 1
        self.count_held()

    def count_held(self) -> None:
        """The K/V held beside the pool now (prompts, resumed and parked samples), into the peak."""
        held = sum(st.kv.numel() * st.kv.element_size() for st in self.prompt_kv.values())
        if self.resumed:
            held += sum(st.kv.numel() * st.kv.element_size() for st in self.resumed.values())
        if self.parked:
            held += sum(kv.numel() * kv.element_size() for kv in self.parked.values())
        self.prompt_kv_bytes_peak = max(self.prompt_kv_bytes_peak, held)

    def park(self, seq: Sequence) -> None:
        """``seq`` leaves for its tools: keeps its K/V (its prompt and every token but the last: out of its slot, or
        of the prefill it ended on) for its resume, unless that would take the parked K/V past :attr:`park_budget`."""
        n = len(self.prompts[seq.prompt_idx]) + len(seq) - 1  # positions with K/V: the last token was never fed
        if self.parked_tokens + n > self.park_budget:
            return
        if seq.slot >= 0:  # it ended in a decode step: its slot's K/V are intact until the next step or admission
            kv = self.pool.kv[:, :, self.place[seq.slot], :, :n].clone()  # (2, layers, kv_heads, n, head_dim)
        else:  # it ended on the first token of a prefill (its prompt's, or its resume's)
            kv = self.state(seq).kv[:, :, :, :n]
        self.parked[seq.prompt_idx, seq.sample_idx] = kv
        self.parked_tokens += n
        self.count_held()

    def unpark(self, seq: Sequence) -> torch.Tensor | None:
        """Drops ``seq``'s parked K/V (resumed on them, or finished); returns them (None: none were parked)."""
        kv = self.parked.pop((seq.prompt_idx, seq.sample_idx), None)
        if kv is not None:
            self.parked_tokens -= kv.shape[3]
        return kv

    def state(self, seq: Sequence) -> PromptState:
        """The prefill ``seq`` starts from: its prompt's, or a resumed sample's own."""
        return self.resumed[seq.prompt_idx, seq.sample_idx] if seq.turns else self.prompt_kv[seq.prompt_idx]

    def first_token(self, seq: Sequence) -> tuple[int, float]:
        """``seq``'s first token and its log-prob, drawn by its prompt's prefill (a resumed sample: its next token,
        drawn by its own)."""
        return self.state(seq).first[seq.sample_idx]

    def keep(self, prompts: Container[int], live: Container[int] = ()) -> None:
        """Drops the prefilled K/V of every prompt not in ``prompts`` (the scheduler's ``held``: a new sample still
        needs them) nor in ``live`` (multi-turn samples of it have not finished: a resume builds on them); of those
        kept for resumes alone, at most :attr:`kept_for_resume` (the first kept stay; beyond the bound, a prompt's
        resumed samples prefill it again)."""
        kept, extra = {}, 0
        for i, st in self.prompt_kv.items():
            if i in prompts:
                kept[i] = st
            elif i in live and extra < self.kept_for_resume:
                kept[i], extra = st, extra + 1
        self.prompt_kv = kept

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
        delta = self.deltas.get(seq.prompt_idx, 0)
        self.step.start(place, seq.last_token, position, seq.key, seq.model_tokens, delta)

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
