"""Micro-batches whose prompts appear once: each group's prompt, then the completions that attend to it.

The shared-prompt update (``share_prompt``) runs a prompt's forward once for the completions of its
group that share a micro-batch, instead of once per completion. A :class:`SharedMicroBatch` holds::

    prompt_ids       (n_p, P)   left-padded prompts (each distinct prompt once)
    prompt_mask      (n_p, P)   1 on real prompt tokens
    row_prompt       (n,)       the prompt row of each completion row
    completion_ids   (n, C)     right-padded completions
    completion_real  (n, C)     1 on generated tokens
    completion_mask  (n, C)     the loss mask (generated tokens; 0 on a row left out of the loss)

Its size for the token budget is ``n_p * P + n * C`` padded tokens: a group's prompt counts once.
:func:`pack_groups_by_token_budget` keeps a group's completions together while they fit, and splits
a group whose completions exceed the budget over several micro-batches, each running the prompt again
(its gradient then arrives in parts that add up to the whole: nothing is counted twice).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SharedMicroBatch:
    """Prompts once and their completions (see the module docstring), and their row indices in the batch."""

    rows: list[int]
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    row_prompt: torch.Tensor
    completion_ids: torch.Tensor
    completion_real: torch.Tensor
    completion_mask: torch.Tensor

    @property
    def generated(self) -> torch.Tensor:
        """(n, C) bool: the generated tokens (not padding), whatever the loss mask says."""
        return self.completion_real.bool()

    @property
    def padded_tokens(self) -> int:
        """Prompt plus completion positions the forwards run over: ``n_p * P + n * C``."""
        return self.prompt_ids.numel() + self.completion_ids.numel()

    def to(self, device: torch.device | str) -> SharedMicroBatch:
        """A copy with every tensor on ``device``."""
        tensors = (self.prompt_ids, self.prompt_mask, self.row_prompt, self.completion_ids, self.completion_real)
        tensors += (self.completion_mask,)
        return SharedMicroBatch(self.rows, *(t.to(device) for t in tensors))


def pack_groups_by_token_budget(
    row_prompt: list[int], prompt_lengths: list[int], completion_lengths: list[int], token_budget: int
) -> list[list[int]]:
    """Row indices per micro-batch, each within ``token_budget`` (``n_p * P + n * C`` padded tokens).

    ``row_prompt[i]`` is row i's prompt; ``prompt_lengths`` are per prompt. Groups are taken longest
    first (their prompt plus longest completion), their rows longest first, so padding stays low; a row
    whose prompt and completion alone exceed the budget forms a micro-batch alone.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget={token_budget} must be >= 1")
    if len(row_prompt) != len(completion_lengths):
        raise ValueError(f"{len(row_prompt)} rows but {len(completion_lengths)} completion lengths")
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(row_prompt):
        groups.setdefault(p, []).append(i)
    longest = {p: max(completion_lengths[i] for i in rows) for p, rows in groups.items()}
    order = sorted(groups, key=lambda p: -(prompt_lengths[p] + longest[p]))
    batches: list[list[int]] = []
    current: list[int] = []
    prompts: set[int] = set()
    p_max = c_max = 0
    for p in order:
        for i in sorted(groups[p], key=lambda i: -completion_lengths[i]):
            new_prompts = len(prompts | {p})
            p_new, c_new = max(p_max, prompt_lengths[p]), max(c_max, completion_lengths[i])
            if current and new_prompts * p_new + (len(current) + 1) * c_new > token_budget:
                batches.append(current)
                current, prompts, p_new, c_new = [], set(), prompt_lengths[p], completion_lengths[i]
            current.append(i)
            prompts.add(p)
            p_max, c_max = p_new, c_new
    if current:
        batches.append(current)
    return batches


def collate_shared(
    rows: list[int], row_prompt: list[int], prompts: list[list[int]], completions: list[list[int]], pad_id: int
) -> SharedMicroBatch:
    """The padded tensors of the micro-batch of ``rows``; ``prompts`` are per prompt, ``completions`` per row."""
    order = list(dict.fromkeys(row_prompt[i] for i in rows))  # this micro-batch's prompts, first seen first
    local = {p: k for k, p in enumerate(order)}
    ps, cs = [prompts[p] for p in order], [completions[i] for i in rows]
    p_len, c_len = max(map(len, ps)), max(1, *map(len, cs))  # one padding column at least: a forward to run
    prompt_ids = torch.full((len(ps), p_len), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(ps), p_len), dtype=torch.long)
    for k, p in enumerate(ps):
        prompt_ids[k, p_len - len(p) :] = torch.tensor(p, dtype=torch.long)
        prompt_mask[k, p_len - len(p) :] = 1
    comp_ids = torch.full((len(rows), c_len), pad_id, dtype=torch.long)
    comp_mask = torch.zeros((len(rows), c_len), dtype=torch.float32)
    for r, c in enumerate(cs):
        comp_ids[r, : len(c)] = torch.tensor(c, dtype=torch.long)
        comp_mask[r, : len(c)] = 1.0
    row_prompt_t = torch.tensor([local[row_prompt[i]] for i in rows], dtype=torch.long)
    return SharedMicroBatch(rows, prompt_ids, prompt_mask, row_prompt_t, comp_ids, comp_mask.long(), comp_mask.clone())


def prepare_shared_microbatches(
    prompts: list[list[int]], row_prompt: list[int], completions: list[list[int]], token_budget: int, pad_id: int
) -> list[SharedMicroBatch]:
    """Packs the rollout's completions (row i of prompt ``row_prompt[i]``) into shared-prompt micro-batches."""
    groups = pack_groups_by_token_budget(
        row_prompt, [len(p) for p in prompts], [len(c) for c in completions], token_budget
    )
    return [collate_shared(rows, row_prompt, prompts, completions, pad_id) for rows in groups]


def split_shared(
    mb: SharedMicroBatch, per_row: list[torch.Tensor | None]
) -> list[tuple[SharedMicroBatch, list[torch.Tensor | None]]]:
    """``mb`` as two micro-batches of half its completion rows each, with the (n, C) tensors of ``per_row``.

    Each half keeps only the prompts its rows use, and drops the columns that become all padding. A
    one-row micro-batch is returned as is. Used to retry an update that ran out of memory.
    """
    n = len(mb.rows)
    if n < 2:
        return [(mb, per_row)]
    halves = []
    for lo, hi in ((0, n // 2), (n // 2, n)):
        used = torch.unique(mb.row_prompt[lo:hi])  # sorted prompt rows of this half (on the batch's device)
        prompt_mask = mb.prompt_mask[used]
        start = int((prompt_mask.sum(dim=0) > 0).nonzero().min().item())
        c_len = max(1, int(mb.completion_real[lo:hi].sum(dim=1).max().item()))
        remap = torch.full((mb.prompt_ids.shape[0],), -1, dtype=torch.long, device=used.device)
        remap[used] = torch.arange(len(used), device=used.device)
        half = SharedMicroBatch(
            mb.rows[lo:hi],
            mb.prompt_ids[used, start:],
            prompt_mask[:, start:],
            remap[mb.row_prompt[lo:hi]],
            mb.completion_ids[lo:hi, :c_len],
            mb.completion_real[lo:hi, :c_len],
            mb.completion_mask[lo:hi, :c_len],
        )
        halves.append((half, [t[lo:hi, :c_len] if t is not None else None for t in per_row]))
    return halves
