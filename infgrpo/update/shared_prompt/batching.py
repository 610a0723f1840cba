"""Micro-batches whose prompts appear once: each group's prompt, then the completions that attend to it.

The shared-prompt update (``share_prompt``) runs a prompt's forward once for the completions of its
group that share a micro-batch, instead of once per completion. A :class:`SharedMicroBatch` holds::

    prompt_ids       (n_p, P)   left-padded prompts (each distinct prompt once)
    prompt_mask      (n_p, P)   1 on real prompt tokens
    row_prompt       (n,)       the prompt row of each completion row
    completion_ids   (n, C)     right-padded completions
    completion_real  (n, C)     1 on generated tokens
    completion_mask  (n, C)     the loss mask (generated tokens; 0 on tool results, on a row left out of the loss)
    prompts          [n_p]      the rollout's index of each prompt row (which prompt it is)
    frozen                      its rows' old, reference and behaviour log-probs and entropy mask, (n, C) each
    visions          [n_p]      each prompt row's images (VisionInputs or None), or None: text prompts

Its size for the token budget is ``n_p * P + n * C`` padded tokens: a group's prompt counts once.
:func:`pack_groups_by_token_budget` keeps a group's completions together while that is cheapest and
they fit, and splits a group over several micro-batches where its completions exceed the budget or
where a split saves padding (a long completion among short ones). Such a group's micro-batches follow
each other with its prompt alone, so a pass over them runs the prompt once and gathers its gradient
from all of them (:mod:`infgrpo.update.shared_prompt.carry`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from infgrpo.update.batching import Frozen
from infgrpo.vision.inputs import VisionInputs


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
    prompts: list[int]
    frozen: Frozen = field(default_factory=Frozen)
    visions: list[VisionInputs | None] | None = None
    """Each prompt row's images (its prompt forward encodes them once); None: text prompts."""

    @property
    def generated(self) -> torch.Tensor:
        """(n, C) bool: the generated tokens (not padding), whatever the loss mask says."""
        return self.completion_real.bool()

    @property
    def padded_tokens(self) -> int:
        """Prompt plus completion positions the forwards run over: ``n_p * P + n * C``."""
        return self.prompt_ids.numel() + self.completion_ids.numel()

    @property
    def once_prompts(self) -> list[int]:
        """The prompts whose forward this micro-batch runs once for several rows: ``prompts``, every one."""
        return self.prompts

    def halves(self) -> list[SharedMicroBatch]:
        """Its completion rows in two micro-batches, their frozen tensors split alike (:func:`split_shared`)."""
        return split_shared(self)

    def to(self, device: torch.device | str) -> SharedMicroBatch:
        """A copy with every tensor on ``device``."""
        tensors = (self.prompt_ids, self.prompt_mask, self.row_prompt, self.completion_ids, self.completion_real)
        tensors += (self.completion_mask,)
        return SharedMicroBatch(
            self.rows, *(t.to(device) for t in tensors), self.prompts, self.frozen.to(device), self.visions
        )


MICRO_BATCH_TOKENS = 48
"""What the packer charges a micro-batch beyond its padded tokens: the fixed cost of its forwards and their
backward, in tokens' worth (it keeps a split from saving less than that). Measured on the SmolLM2 job
(``bench learn``, one CPU thread): ~0.4 s a micro-batch beyond ~8 ms a padded token, about 48 tokens."""


def split_group(prompt_length: int, lengths: list[int], token_budget: int) -> list[list[int]]:
    """The split of one group's completions (``lengths``, longest first) into consecutive runs, each a
    micro-batch, of the fewest padded completion tokens plus :data:`MICRO_BATCH_TOKENS` each.

    A run of rows ``i .. j - 1`` costs ``(j - i) * lengths[i]`` (its longest row sets the padding); the
    prompt runs once for the whole group however it is split (:mod:`infgrpo.update.shared_prompt.carry`), but
    each micro-batch holds it, so a run must keep ``prompt_length + (j - i) * lengths[i]`` within
    ``token_budget`` unless it is a single row. Consecutive runs of the sorted rows are optimal among all
    splits (a run's cost only needs its size and its longest row). Returns the runs as positions into
    ``lengths``; a dynamic program over the rows, O(n^2).
    """
    n = len(lengths)
    best = [0.0] + [float("inf")] * n  # best[j]: the cheapest split of rows 0 .. j - 1
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j - 1, -1, -1):
            cost = (j - i) * lengths[i] + MICRO_BATCH_TOKENS
            if prompt_length + cost - MICRO_BATCH_TOKENS > token_budget and j - i > 1:
                break  # longer runs (smaller i) only cost more
            if best[i] + cost <= best[j]:  # a tie goes to the longer last run: fewer micro-batches
                best[j], cut[j] = best[i] + cost, i
    runs, j = [], n
    while j > 0:
        runs.append(list(range(cut[j], j)))
        j = cut[j]
    return runs[::-1]


def pack_groups_by_token_budget(
    row_prompt: list[int], prompt_lengths: list[int], completion_lengths: list[int], token_budget: int
) -> list[list[int]]:
    """Row indices per micro-batch, each within ``token_budget`` (``n_p * P + n * C`` padded tokens).

    ``row_prompt[i]`` is row i's prompt; ``prompt_lengths`` are per prompt. Each group's rows, longest
    first, are split where that saves padding (:func:`split_group`: a truncated completion among short
    ones gets a micro-batch of its own rather than padding the others to its length). A group split so
    has consecutive micro-batches of its own, its prompt their only one, which lets a pass run that
    prompt once (:class:`~infgrpo.update.shared_prompt.carry.PromptCarry`). Whole groups, longest first, share
    micro-batches while the budget allows and sharing saves more than the padding it adds. A row whose
    prompt and completion alone exceed the budget forms a micro-batch alone. The largest micro-batch comes
    first (a split group's, the largest of its runs): in a pass with gradients it then runs before the first
    backward has allocated the parameters' gradients.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget={token_budget} must be >= 1")
    if len(row_prompt) != len(completion_lengths):
        raise ValueError(f"{len(row_prompt)} rows but {len(completion_lengths)} completion lengths")
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(row_prompt):
        groups.setdefault(p, []).append(i)
    whole: list[list[int]] = []
    split: list[list[list[int]]] = []  # per split group, its runs
    for p, rows in groups.items():
        rows = sorted(rows, key=lambda i: -completion_lengths[i])
        lengths = [completion_lengths[i] for i in rows]
        runs = [[rows[k] for k in run] for run in split_group(prompt_lengths[p], lengths, token_budget)]
        if len(runs) == 1:
            whole.extend(runs)
        else:
            split.append(runs)

    def cost(rows: list[int]) -> int:  # padded tokens of one micro-batch
        prompts = {row_prompt[i] for i in rows}
        return len(prompts) * max(prompt_lengths[q] for q in prompts) + len(rows) * max(
            completion_lengths[i] for i in rows
        )

    whole.sort(key=lambda run: -(prompt_lengths[row_prompt[run[0]]] + completion_lengths[run[0]]))
    batches: list[list[int]] = []
    for run in whole:
        if batches:
            merged = batches[-1] + run
            if cost(merged) <= token_budget and cost(merged) <= cost(batches[-1]) + cost(run) + MICRO_BATCH_TOKENS:
                batches[-1] = merged
                continue
        batches.append(run)
    # the largest micro-batch first (its peak then holds no gradient buffers: the first backward allocates them),
    # a split group's runs consecutive and largest first
    units = [[b] for b in batches] + [sorted(runs, key=cost, reverse=True) for runs in split]
    units.sort(key=lambda unit: -cost(unit[0]))
    return [rows for unit in units for rows in unit]


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
    real = comp_mask.long()
    return SharedMicroBatch(rows, prompt_ids, prompt_mask, row_prompt_t, comp_ids, real, comp_mask.clone(), order)


def prepare_shared_microbatches(
    prompts: list[list[int]], row_prompt: list[int], completions: list[list[int]], token_budget: int, pad_id: int
) -> list[SharedMicroBatch]:
    """Packs the rollout's completions (row i of prompt ``row_prompt[i]``) into shared-prompt micro-batches."""
    groups = pack_groups_by_token_budget(
        row_prompt, [len(p) for p in prompts], [len(c) for c in completions], token_budget
    )
    return [collate_shared(rows, row_prompt, prompts, completions, pad_id) for rows in groups]


def split_shared(mb: SharedMicroBatch) -> list[SharedMicroBatch]:
    """``mb`` as two micro-batches of half its completion rows each, with its frozen tensors split alike.

    Each half keeps only the prompts its rows use, and drops the columns that become all padding. A
    one-row micro-batch is returned as is. Used to retry an update that ran out of memory.
    """
    n = len(mb.rows)
    if n < 2:
        return [mb]
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
            [mb.prompts[k] for k in used.tolist()],
            mb.frozen.cut(slice(lo, hi), c_len),
            [mb.visions[k] for k in used.tolist()] if mb.visions is not None else None,
        )
        halves.append(half)
    return halves
