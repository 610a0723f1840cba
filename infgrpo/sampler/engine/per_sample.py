"""PerSampleBatch: a fixed batch whose samples of one row may decode different prompts (environments' observations).

    feed = PerSampleBatch([[p0, p0, p1], [q0, q0, q0]], seed=0)   # row 0: two samples of p0, one of p1; row 1: q0
    stats = engine.run(feed, num_slots=4)
    feed.prompts                                                  # [p0, p1, q0]: each distinct prompt once a row
    feed.rows(0)                                                  # row 0's 3 samples, in sample order

TRL 1.16 renders a prompt per rollout: with ``environment_factory``, ``reset(**row)`` may give each sample of a row
its own observation. The row stays the group (its samples share the advantages' mean and std), but what the engine
prefills is each **distinct** prompt of the row, once: samples whose prompts are equal still share one prefilled
prompt (compared within a row). The engine's prompts are those distinct prompts, so its scheduler, prompt K/V and
slot pool work unchanged, and memory stays bounded by ``num_slots``. Sample j of row i keeps the random stream
(seed, prompt_offset + i, j) whatever prompt it decodes, so its tokens do not depend on the slot count or on which
samples share a prompt; its :class:`~infgrpo.sampler.schedule.sequence.Sequence` has ``prompt_idx`` = its prompt's
index here, ``sample_idx`` = j and ``row`` = i.

No adaptive groups or dynamic sampling here: both extend or judge a prompt's group, which is a row only when the row
has one prompt.
"""

from __future__ import annotations

from infgrpo.sampler.engine.counter_rng import stream_key
from infgrpo.sampler.engine.feed import Feed
from infgrpo.sampler.schedule.sequence import Sequence


class PerSampleBatch(Feed):
    """``prompts[i][j]``: the prompt ids sample j of row i decodes (every row has ``group_size`` samples); see the
    module docstring. ``predicted_lengths`` (one per row) order the work for the length-aware refill policies."""

    def __init__(
        self,
        prompts: list[list[list[int]]],
        seed: int,
        predicted_lengths: list[float] | None = None,
        prompt_offset: int = 0,
    ) -> None:
        group_size = len(prompts[0]) if prompts else 0
        if any(len(row) != group_size for row in prompts):
            raise ValueError(f"every row needs group_size={group_size} prompts, one a sample")
        longest = max((len(p) for row in prompts for p in row), default=0)
        super().__init__(group_size, seed, prompt_offset, len(prompts), longest, predicted_lengths is not None)
        self.row_prompts: list[list[int]] = [row[0] for row in prompts] if group_size else []
        """Each row's first sample's prompt (``Rollouts.prompt_ids``)."""
        self.by_row: list[list[Sequence]] = []
        for i, row in enumerate(prompts):
            index: dict[tuple[int, ...], int] = {}  # this row's distinct prompts -> the engine's prompt index
            seqs = []
            for j, ids in enumerate(row):
                p = index.setdefault(tuple(ids), len(self.prompts))
                if p == len(self.prompts):
                    self.prompts.append(list(ids))
                    self.groups.append([])
                    self.left.append(0)
                seq = Sequence(p, j, key=stream_key(seed, prompt_offset + i, j), row=i)
                if predicted_lengths is not None:
                    seq.predicted_length = float(predicted_lengths[i])
                self.groups[p].append(seq)
                self.left[p] += 1
                seqs.append(seq)
            self.by_row.append(seqs)

    def initial(self) -> list[Sequence]:
        """Every sequence, row-major (row by row, sample by sample)."""
        return [s for row in self.by_row for s in row]

    def trained(self) -> list[int]:
        """Every row, ascending (rows, not the engine's prompts)."""
        return list(range(len(self.by_row)))

    def rows(self, i: int) -> list[Sequence]:
        """Row ``i``'s ``group_size`` samples, in sample order."""
        return self.by_row[i]

    def row_prompt(self, i: int) -> list[int]:
        """Row ``i``'s first sample's prompt."""
        return self.row_prompts[i]
