"""Per-token log-probs of completions under a model, without a whole-batch float32 logits tensor."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from infgrpo.update.batching import MicroBatch


def completion_logprobs(
    model: PreTrainedModel, mb: MicroBatch, temperature: float = 1.0, chunk_rows: int = 8
) -> torch.Tensor:
    """Log-probs (n, C) of ``mb.completion_ids`` under ``model`` at ``temperature``.

    Only the last C + 1 positions produce logits (``logits_to_keep``), and the log-softmax runs in
    chunks of ``chunk_rows`` rows so float32 logits of the whole micro-batch never coexist.
    """
    c_len = mb.completion_ids.shape[1]
    out = model(
        input_ids=mb.input_ids,
        attention_mask=mb.attention_mask,
        position_ids=mb.position_ids,
        logits_to_keep=c_len + 1,
        use_cache=False,
    )
    if out.logits.shape[1] != c_len + 1:
        raise ValueError(
            f"{type(model).__name__} returned logits for {out.logits.shape[1]} positions, not the last {c_len + 1}: "
            "it ignores logits_to_keep, which infgrpo needs to align completion tokens with their log-probs"
        )
    logits = out.logits[:, :-1]  # (n, C, V): position t predicts completion token t
    scale = temperature if temperature > 0 else 1.0
    pieces = []
    for s in range(0, logits.shape[0], chunk_rows):
        chunk = logits[s : s + chunk_rows]
        chunk = chunk.to(torch.promote_types(chunk.dtype, torch.float32)) / scale  # bf16 -> f32, f64 stays
        tok = mb.completion_ids[s : s + chunk_rows].unsqueeze(-1)
        pieces.append(torch.log_softmax(chunk, dim=-1).gather(-1, tok).squeeze(-1))
    return torch.cat(pieces, dim=0)
