"""Rollouts: what one call of the sampler returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from infgrpo.sampler.schedule.sequence import Sequence

if TYPE_CHECKING:
    from infgrpo.sampler.engine.summaries import AdaptiveSummary, DynamicSummary, ToolSummary
    from infgrpo.vision.inputs import VisionInputs


@dataclass
class Rollouts:
    """Completions of ``num_prompts`` prompts x ``group_size`` samples, prompt-major.

    Entry ``i`` belongs to prompt ``i // group_size``. ``completion_ids[i]`` includes the stop token
    when ``finish_reasons[i] == "stop"``; ``logprobs[i]`` (len(completion_ids[i]),) holds each
    generated token's log-prob under the model's distribution at the sampling temperature, before
    top-k / top-p filtering (the same quantity the training forward computes); decoder ``hf_cb``
    (transformers' continuous batching) gives them after that filtering.
    """

    prompt_ids: list[list[int]]
    group_size: int
    completion_ids: list[list[int]]
    logprobs: list[torch.Tensor]
    finish_reasons: list[str]
    stats: dict[str, Any] = field(default_factory=dict)
    drawn: list[int] | None = None
    """Dynamic sampling: each prompt's position in the rollout's draw order (None: the prompts as given)."""
    sample_ids: list[int] | None = None
    """The engine's: each entry's sample index within its prompt's group (its random stream; adaptive groups train
    on ``group_size`` samples of a group that grew, the judge's pick, not always the first)."""
    dynamic: DynamicSummary | None = None
    """Dynamic sampling: what the rollout found (kept, dropped, capped, ...); None otherwise."""
    adaptive: AdaptiveSummary | None = None
    """Adaptive groups: what the rollout's extensions did (stalled, extended, rescued groups, ...); None otherwise."""
    tool_masks: list[list[int]] | None = None
    """Multi-turn rollouts (tools): per entry, 1 on each token the model generated and 0 on each tool-result token
    (TRL's ``tool_mask``; ``len(tool_masks[i]) == len(completion_ids[i])``); None when no entry called a tool."""
    exchanges: list[Any] | None = None
    """Multi-turn rollouts: per entry, what the host's ``Turns.ended`` recorded when the sample finished (with
    ``model.agent``: its exchange, the messages TRL's rewards get as the completion, and its environment); None
    without turns."""
    tools: ToolSummary | None = None
    """Multi-turn rollouts: what the tools did (calls, failures, rounds, waits); None without turns."""
    vision: list[VisionInputs | None] | None = None
    """Image prompts (a vision-language model): each prompt's images, one entry per prompt (None: a text prompt);
    the update runs them through the vision tower once per prompt in each forward pass. None: text prompts only."""
    entry_prompts: list[list[int]] | None = None
    """When the samples of a row decoded different prompts (environments' observations): per entry, the prompt it
    decoded (one list object for the samples that shared it); ``prompt_ids[i]`` is then row i's first sample's.
    None: every entry decoded its row's ``prompt_ids``. See :meth:`prompt_table`."""

    @classmethod
    def from_sequences(
        cls,
        prompt_ids: list[list[int]],
        group_size: int,
        seqs: list[Sequence],
        decoded: list[list[int]] | None = None,
    ) -> Rollouts:
        """The rollouts of finished sequences (the engine's), prompt-major; ``tool_masks`` when some sequence
        took tool results, ``exchanges`` when the turns recorded something, ``entry_prompts`` (from ``decoded``,
        the engine's prompts) when a sequence's row is not its prompt."""
        tools = any(s.tool_mask is not None for s in seqs)
        per_sample = decoded is not None and any(s.row is not None for s in seqs)
        return cls(
            prompt_ids=[list(p) for p in prompt_ids],
            group_size=group_size,
            completion_ids=[s.token_ids for s in seqs],
            logprobs=[s.logprobs for s in seqs],
            finish_reasons=[s.finish_reason for s in seqs],
            tool_masks=[s.tool_mask if s.tool_mask is not None else [1] * len(s) for s in seqs] if tools else None,
            sample_ids=[s.sample_idx for s in seqs],
            exchanges=[s.record for s in seqs] if any(s.record is not None for s in seqs) else None,
            entry_prompts=[decoded[s.prompt_idx] for s in seqs] if per_sample else None,
        )

    @property
    def lengths(self) -> list[int]:
        """Completion lengths in tokens (stop token included), one per entry."""
        return [len(c) for c in self.completion_ids]

    @property
    def prompt_index(self) -> list[int]:
        """The prompt each entry belongs to: ``i // group_size``."""
        return [i // self.group_size for i in range(len(self.completion_ids))]

    @property
    def sample_keys(self) -> list[tuple[int, int]]:
        """(prompt index, sample index) of each entry, prompt-major (the sample index: :attr:`sample_ids`, else the
        entry's place in its group)."""
        ids = self.sample_ids if self.sample_ids is not None else [n % self.group_size for n in range(len(self))]
        return list(zip(self.prompt_index, ids, strict=True))

    def __len__(self) -> int:
        return len(self.completion_ids)

    def prompt_table(self) -> tuple[list[list[int]], list[int]]:
        """(the distinct prompts the entries decoded, each entry's index into them): ``prompt_ids`` and
        :attr:`prompt_index`, or with :attr:`entry_prompts` each distinct prompt of a row once (a row of several
        prompts is several shared prompts: the update runs each once)."""
        if self.entry_prompts is None:
            return self.prompt_ids, self.prompt_index
        table: list[list[int]] = []
        seen: dict[tuple[int, tuple[int, ...]], int] = {}
        index = []
        for row, ids in zip(self.prompt_index, self.entry_prompts, strict=True):
            index.append(seen.setdefault((row, tuple(ids)), len(table)))
            if index[-1] == len(table):
                table.append(list(ids))
        return table, index

    @property
    def model_lengths(self) -> list[int]:
        """Tokens the model generated, one per entry: :attr:`lengths` less the tool-result tokens (TRL counts
        ``sum(tool_mask)`` for ``completions/*_length`` and the loss's token count)."""
        if self.tool_masks is None:
            return self.lengths
        return [sum(m) for m in self.tool_masks]

    @property
    def truncated(self) -> list[bool]:
        """Entries cut at ``max_new_tokens``: finish reason ``length``, or a multi-turn entry whose last token is a
        tool result's (TRL's ``is_truncated``: the last token is not the end of a model turn)."""
        cut = [r == "length" for r in self.finish_reasons]
        if self.tool_masks is None:
            return cut
        return [c or (bool(m) and m[-1] == 0) for c, m in zip(cut, self.tool_masks, strict=True)]
