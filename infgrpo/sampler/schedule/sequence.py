"""Sequence: one completion being decoded (prompt index, sample index, tokens so far; with tools, its turns)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

import torch


class SequenceStatus(Enum):
    """Where a :class:`Sequence` is: in the waiting queue, decoding in a slot, or finished."""

    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


@dataclass
class Sequence:
    """A completion of prompt ``prompt_idx``; ``sample_idx`` is its index within the group."""

    prompt_idx: int
    sample_idx: int
    key: tuple[int, int] = (0, 0)
    """Its random stream's key words (k0, k1): see :mod:`infgrpo.sampler.engine.counter_rng`."""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | torch.Tensor = field(default_factory=list)
    """Per-token log-probs; a float32 tensor once finished (4 bytes a token instead of 32)."""
    status: SequenceStatus = SequenceStatus.WAITING
    finish_reason: str | None = None
    slot: int = -1
    start_step: int = -1
    end_step: int = -1
    predicted_length: float | None = None
    tool_mask: list[int] | None = None
    """Multi-turn samples: 1 on each token the model generated, 0 on each tool-result token (TRL's ``tool_mask``);
    None until the sample first comes back from a tool (then ``[1] * len`` and the suffix's 0s)."""
    turn_start: int = 0
    """The index in ``token_ids`` where the current model turn began (0, then past each tool result)."""
    turns: int = 0
    """Tool rounds appended so far (a sample with ``turns > 0`` is resumed: its prompt K/V are not held for it)."""
    record: Any = None
    """Multi-turn samples: what the host's ``Turns.ended`` recorded when the sample finished (its exchange)."""
    row: int | None = None
    """The row (training group) it belongs to when the samples of a row decode different prompts (environments'
    observations: :mod:`infgrpo.sampler.engine.per_sample`); None: its prompt's, ``prompt_idx``."""

    @property
    def row_idx(self) -> int:
        """The row it trains with (and whose environment instance (row, ``sample_idx``) it has): ``row``, else
        ``prompt_idx``."""
        return self.prompt_idx if self.row is None else self.row

    @property
    def model_tokens(self) -> int:
        """Tokens the model generated (tool mask 1): the counter ``t`` of its next token's uniform."""
        return len(self.token_ids) if self.tool_mask is None else sum(self.tool_mask)

    @property
    def last_token(self) -> int:
        """The most recently generated token id (IndexError before the first token)."""
        return self.token_ids[-1]

    def __len__(self) -> int:
        return len(self.token_ids)
