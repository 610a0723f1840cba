"""Each rank's position in the data module's prompt stream (dynamic sampling), saved and restored exactly.

    checkpoint["infgrpo_stream"] = gather_stream_positions(datamodule, ranks)       # every rank calls it
    restore_stream_position(checkpoint["infgrpo_stream"], datamodule, ranks)         # before the first step

Ranks draw different numbers of extra prompts, so the checkpoint (written by rank 0) keeps every rank's
count, gathered; a resumed run on another number of ranks starts the streams afresh.
"""

from __future__ import annotations

from typing import Any

import torch

from infgrpo.runtime.ranks import Ranks


def gather_stream_positions(datamodule: Any, ranks: Ranks) -> list[int] | None:
    """Every rank's count of prompts drawn from the stream (None without a stream-drawing data module)."""
    if not hasattr(datamodule, "prompt_stream"):
        return None
    stream = datamodule.stream
    position = stream.position if stream is not None else datamodule.stream_start
    return [int(x) for x in ranks.gather(torch.tensor([position], dtype=torch.long)).flatten().tolist()]


def restore_stream_position(positions: list[int] | None, datamodule: Any, ranks: Ranks) -> None:
    """This rank's stream continues where the checkpoint left it (nothing on another number of ranks)."""
    if positions is None or not hasattr(datamodule, "prompt_stream") or len(positions) != ranks.world_size:
        return
    datamodule.stream, datamodule.stream_start = None, positions[ranks.rank]
