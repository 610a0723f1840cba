"""Micro-batches of rollouts bounded by a token budget, so update memory does not grow with G.

A micro-batch is laid out as ``[left-padded prompt | right-padded completion]``::

    input_ids        (n, P + C)   pad | prompt | completion | pad
    attention_mask   (n, P + C)   1 on real tokens
    position_ids     (n, P + C)   0.. along real tokens (padding does not shift positions)
    completion_ids   (n, C)
    completion_mask  (n, C)       the loss mask: 1 on generated tokens (0 on tool results, on rows out of the loss)

so the completion occupies the last C columns and its log-probs come from the last C + 1 logits. Each
micro-batch carries its :class:`Frozen` tensors (old, reference and behaviour log-probs, entropy mask), which
split with its rows (:meth:`MicroBatch.halves`). Rows of image prompts carry their prompt's
:class:`~infgrpo.vision.inputs.VisionInputs` (``visions``): a forward encodes each distinct prompt's images once and
hands the features to its rows (:func:`~infgrpo.vision.features.rows_inputs`), with M-RoPE positions from the model's
``get_rope_index`` instead of ``position_ids``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from infgrpo.runtime.packing import pack_longest_first
from infgrpo.vision.inputs import VisionInputs


@dataclass
class Frozen:
    """A micro-batch's per-token tensors that its loss reads without a gradient, each (n, C) or None.

    The update sets them before its optimizer steps (:class:`~infgrpo.update.runner.PolicyUpdate`);
    :func:`~infgrpo.update.step.accumulate_policy_gradients` reads them.
    """

    old: torch.Tensor | None = None
    """The log-probs of the policy that sampled the rollout, recomputed (``num_iterations > 1``); None: the
    current ones, detached (one iteration)."""
    ref: torch.Tensor | None = None
    """The KL reference's log-probs (``beta > 0``)."""
    behaviour: torch.Tensor | None = None
    """The log-probs the sampler returned with the rollout (the ``rollout/*`` mismatch and its corrections)."""
    entropy_mask: torch.Tensor | None = None
    """The tokens at or above the whole batch's entropy quantile (``top_entropy_quantile < 1``), this step's."""

    def cut(self, rows: slice, width: int) -> Frozen:
        """Its tensors of ``rows``, their first ``width`` columns."""
        return self._map(lambda t: t[rows, :width])

    def to(self, device: torch.device | str) -> Frozen:
        """A copy with every tensor on ``device``."""
        return self._map(lambda t: t.to(device))

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Frozen:
        tensors = (self.old, self.ref, self.behaviour, self.entropy_mask)
        return Frozen(*(fn(t) if t is not None else None for t in tensors))


@dataclass
class MicroBatch:
    """Padded tensors of some rollouts (see module docstring) and their row indices in the batch."""

    rows: list[int]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    frozen: Frozen = field(default_factory=Frozen)
    visions: list[VisionInputs | None] | None = None
    """Each row's prompt's images (one object per prompt, shared by its rows); None: text prompts."""

    @property
    def generated(self) -> torch.Tensor:
        """(n, C) bool: the generated tokens (not padding), whatever the loss mask says: the mask's last C columns
        (counted from the front, so that C = 0 gives no columns rather than all of them)."""
        c_len, width = self.completion_ids.shape[1], self.attention_mask.shape[1]
        return self.attention_mask[:, width - c_len :].bool()

    @property
    def padded_tokens(self) -> int:
        """Positions the forward runs over: rows x (P + C)."""
        return self.input_ids.numel()

    @property
    def once_prompts(self) -> list[int]:
        """The prompts whose forward this micro-batch runs once for several rows: none (each row holds its own)."""
        return []

    def halves(self) -> list[MicroBatch]:
        """Its rows in two micro-batches, their frozen tensors split alike (:func:`split_rows`)."""
        return split_rows(self)

    def to(self, device: torch.device | str) -> MicroBatch:
        """A copy with every tensor on ``device``."""
        return MicroBatch(
            self.rows,
            *(t.to(device) for t in (self.input_ids, self.attention_mask, self.position_ids)),
            self.completion_ids.to(device),
            self.completion_mask.to(device),
            self.frozen.to(device),
            self.visions,
        )


def pack_by_token_budget(
    prompt_lengths: list[int], completion_lengths: list[int], token_budget: int
) -> list[list[int]]:
    """Groups row indices so each group's padded size stays within ``token_budget`` tokens.

    A micro-batch pads every row to the longest prompt plus the longest completion in it (see
    :func:`collate`), so a group of n rows costs n x (max prompt + max completion). Rows are taken
    longest first, which keeps padding low; a row longer than the budget on its own forms a
    micro-batch alone (:func:`~infgrpo.runtime.packing.pack_longest_first`, prompts and completions its
    parts). Returns lists of row indices covering every row exactly once.
    """
    if len(prompt_lengths) != len(completion_lengths):
        raise ValueError(f"{len(prompt_lengths)} prompt lengths but {len(completion_lengths)} completion lengths")
    return pack_longest_first(token_budget, prompt_lengths, completion_lengths)


def collate(rows: list[int], prompts: list[list[int]], completions: list[list[int]], pad_id: int) -> MicroBatch:
    """Builds the padded tensors of one micro-batch from prompt and completion token lists."""
    ps = [prompts[i] for i in rows]
    cs = [completions[i] for i in rows]
    p_len, c_len, n = max(map(len, ps)), max(map(len, cs)), len(rows)
    input_ids = torch.full((n, p_len + c_len), pad_id, dtype=torch.long)
    attention = torch.zeros((n, p_len + c_len), dtype=torch.long)
    comp_ids = torch.full((n, c_len), pad_id, dtype=torch.long)
    comp_mask = torch.zeros((n, c_len), dtype=torch.float32)
    for r, (p, c) in enumerate(zip(ps, cs, strict=True)):
        input_ids[r, p_len - len(p) : p_len] = torch.tensor(p)
        input_ids[r, p_len : p_len + len(c)] = torch.tensor(c, dtype=torch.long)
        attention[r, p_len - len(p) : p_len + len(c)] = 1
        comp_ids[r, : len(c)] = torch.tensor(c, dtype=torch.long)
        comp_mask[r, : len(c)] = 1.0
    position_ids = (attention.cumsum(dim=1) - 1).clamp(min=0)
    return MicroBatch(rows, input_ids, attention, position_ids, comp_ids, comp_mask)


def split_rows(mb: MicroBatch) -> list[MicroBatch]:
    """``mb`` as two micro-batches of half its rows each, with its :class:`Frozen` tensors split alike.

    Columns that become all padding are dropped (prompt padding on the left, completion padding on
    the right), so each half costs at most half the tokens. A one-row micro-batch is returned as is.
    Used to retry an update that ran out of memory with smaller micro-batches.
    """
    n = len(mb.rows)
    if n < 2:
        return [mb]
    halves = []
    for lo, hi in ((0, n // 2), (n // 2, n)):
        c_len = int(mb.generated[lo:hi].sum(dim=1).max().item())
        c_full = mb.completion_ids.shape[1]
        p_full = mb.input_ids.shape[1] - c_full
        p_start = int((mb.attention_mask[lo:hi, :p_full].sum(dim=0) > 0).nonzero().min().item()) if p_full else 0
        cols = slice(p_start, p_full + c_len)
        half = MicroBatch(
            mb.rows[lo:hi],
            mb.input_ids[lo:hi, cols],
            mb.attention_mask[lo:hi, cols],
            mb.position_ids[lo:hi, cols],
            mb.completion_ids[lo:hi, :c_len],
            mb.completion_mask[lo:hi, :c_len],
            mb.frozen.cut(slice(lo, hi), c_len),
            mb.visions[lo:hi] if mb.visions is not None else None,
        )
        halves.append(half)
    return halves
