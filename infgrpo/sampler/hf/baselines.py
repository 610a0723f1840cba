"""The HF decoders: ``generate`` in micro groups over one prefilled prompt, the two baselines, and ``hf_cb``.

    rollouts = BASELINES.get("hf_micro")(model, DecodeRequest(prompt_ids, group_size, num_slots, seed, 0, kw, kv))

Chosen by ``SamplerConfig.decoder`` (:data:`Decoder`: the slot-pool ``engine``, or a name of
:data:`BASELINES`):

- ``micro_groups``: the prompt is prefilled **once**; its KV cache is copied into each micro-group
  of ``num_slots`` samples, decoded round by round (the paper's micro sampling groups, without
  continuous refill).
- ``hf_micro``: naive micro-groups, the prompt prefilled each round.
- ``hf_full``: the whole group in one ``generate`` call (memory grows with the group size).
- ``hf_cb``: transformers' own continuous batching (``generate_batch``, as TRL runs it), in
  :mod:`infgrpo.sampler.hf.hf_continuous`. Unlike every other decoder its log-probs are taken after
  top-k / top-p filtering, and its completions depend on the schedule (``num_slots``, the other prompts).

Each ``generate`` round draws from its own seeded generator state, derived from (seed, prompt, round).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
from transformers import DynamicCache, LogitsProcessor, LogitsProcessorList, PreTrainedModel

from infgrpo.registry import Registry
from infgrpo.runtime.seeds import derive_seed
from infgrpo.sampler.hf.hf_continuous import ContinuousBatching
from infgrpo.sampler.hf.request import DecodeRequest
from infgrpo.sampler.rollouts import Rollouts

Decoder = Literal["engine", "micro_groups", "hf_micro", "hf_full", "hf_cb"]
"""``SamplerConfig.decoder``: the slot-pool engine, or one of :data:`BASELINES`."""


@dataclass
class GroupOutput:
    """Completions of one prompt: token lists (with stop token), per-token log-probs, reasons."""

    completion_ids: list[list[int]]
    logprobs: list[torch.Tensor]
    finish_reasons: list[str]
    decode_steps: int
    prefill_tokens: int
    slot_steps: int = 0
    """Sum over rounds of (sequences in the round x decode steps of the round)."""
    peak_tokens_held: int = 0
    """Most KV positions held at once (sequences x (prompt + generated) of the largest round)."""


def generation_kwargs(
    max_new_tokens: int, temperature: float, top_k: int, top_p: float, stop_ids: list[int], pad_id: int
) -> dict:
    """Keyword arguments of ``generate`` for these sampling settings (temperature 0 = greedy)."""
    kw = dict(max_new_tokens=max_new_tokens, eos_token_id=stop_ids, pad_token_id=pad_id, return_dict_in_generate=True)
    if temperature == 0.0:
        kw.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    else:
        kw.update(do_sample=True, temperature=temperature, top_k=top_k or None, top_p=top_p)
    return kw


class LogprobRecorder(LogitsProcessor):
    """Records the log-prob of each sampled token while ``generate`` runs, holding one step of logits.

    Custom processors run before temperature and top-k/top-p in ``generate``, so ``scores`` are the
    raw logits; the token they choose is seen at the next call (or after ``generate`` returns).
    Storing every step's logits instead (``output_logits``) would cost n x steps x vocab floats.
    """

    def __init__(self, temperature: float) -> None:
        self.scale = temperature if temperature > 0 else 1.0
        self.prev: torch.Tensor | None = None  # (n, V) log-probs of the last step
        self.logps: list[torch.Tensor] = []  # per step (n,)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Records the log-probs of the last step's tokens (``input_ids[:, -1]``); holds this step's.

        ``scores`` (n, V) are returned unchanged; the held log-probs (n, V) are their log-softmax at the
        sampling temperature.
        """
        if self.prev is not None:
            self.take(input_ids[:, -1])
        self.prev = torch.log_softmax(scores.float() / self.scale, dim=-1)
        return scores

    def take(self, tokens: torch.Tensor) -> None:
        """Records the log-probs (n,) of ``tokens`` (n,), the ones sampled from the held step's distribution."""
        self.logps.append(self.prev.gather(-1, tokens.unsqueeze(-1)).squeeze(-1))

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """Log-probs (n, T) of the generated tokens (n, T)."""
        if self.prev is not None and len(self.logps) < new_tokens.shape[1]:
            self.take(new_tokens[:, -1])
        return torch.stack(self.logps, dim=1)


def split_completions(
    new_tokens: torch.Tensor, logps: torch.Tensor, stop_ids: list[int]
) -> tuple[list[list[int]], list[torch.Tensor], list[str], int]:
    """Cuts generated ids (n, T) and their log-probs (n, T) at the first stop token.

    Returns per-sequence ids (stop token included), log-probs (len,), finish reasons, and the number
    of decode steps (T).
    """
    steps = new_tokens.shape[1]
    is_stop = torch.isin(new_tokens, torch.tensor(stop_ids, device=new_tokens.device))
    ids, lps, reasons = [], [], []
    for row in range(new_tokens.shape[0]):
        hits = is_stop[row].nonzero()
        end = int(hits[0]) + 1 if len(hits) else steps
        ids.append(new_tokens[row, :end].tolist())
        lps.append(logps[row, :end].cpu())
        reasons.append("stop" if len(hits) else "length")
    return ids, lps, reasons, steps


@torch.no_grad()
def prompt_cache(model: PreTrainedModel, prompt: list[int]) -> DynamicCache | None:
    """KV cache of ``prompt[:-1]`` (batch 1); None for a one-token prompt."""
    if len(prompt) < 2:
        return None
    device = model.device
    out = model(input_ids=torch.tensor([prompt[:-1]], device=device), use_cache=True, logits_to_keep=1)
    return out.cache


@torch.no_grad()
def decode_group(
    model: PreTrainedModel,
    prompt: list[int],
    group_size: int,
    num_slots: int,
    seed: int,
    prompt_index: int,
    gen_kwargs: dict,
    prefill_once: bool = True,
) -> GroupOutput:
    """Decodes ``group_size`` completions of one prompt in rounds of at most ``num_slots``."""
    device = model.device
    stop_ids = gen_kwargs["eos_token_id"]
    temperature = gen_kwargs.get("temperature") or 0.0
    # 1) prefill the prompt once (all tokens but the last, which each round feeds to generate)
    shared = prompt_cache(model, prompt) if prefill_once else None
    prefill_tokens = len(prompt) - 1 if shared is not None else 0
    out = GroupOutput([], [], [], 0, prefill_tokens)
    done = 0
    while done < group_size:
        n = min(num_slots, group_size - done)
        kw = dict(gen_kwargs)
        # 2) copy the prompt's KV into every slot of this micro-group
        if shared is not None:
            cache = copy.deepcopy(shared)
            cache.batch_repeat_interleave(n)
            kw["cache"] = cache
        else:
            out.prefill_tokens += len(prompt)
        # 3) decode the micro-group with its own random stream
        recorder = LogprobRecorder(temperature)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(derive_seed(seed, prompt_index, done))
            res = model.generate(
                torch.tensor([prompt] * n, device=device), logits_processor=LogitsProcessorList([recorder]), **kw
            )
        new_tokens = res.sequences[:, len(prompt) :]
        ids, lps, reasons, steps = split_completions(new_tokens, recorder.finish(new_tokens), stop_ids)
        out.completion_ids += ids
        out.logprobs += lps
        out.finish_reasons += reasons
        out.decode_steps += steps
        out.slot_steps += n * steps
        out.peak_tokens_held = max(out.peak_tokens_held, n * (len(prompt) + steps))
        done += n
    return out


@dataclass(frozen=True)
class Baseline:
    """An HF ``generate`` decoder of a whole rollout: rounds of ``num_slots`` samples per prompt, or the whole group."""

    prefill_once: bool
    """Prefill each prompt once and copy its cache into every round (else every round prefills it)."""
    whole_group: bool
    """One ``generate`` call over the whole group: it needs no pool sizing, callers pass ``num_slots=group_size``."""

    def __call__(self, model: PreTrainedModel, r: DecodeRequest) -> Rollouts:
        """``r.group_size`` completions of each prompt, prompt-major, in rounds of ``r.num_slots``; stats as the
        engine."""
        groups = [
            decode_group(
                model, p, r.group_size, r.num_slots, r.seed, r.prompt_offset + i, r.gen_kwargs, self.prefill_once
            )
            for i, p in enumerate(r.prompt_ids)
        ]
        rollouts = Rollouts(
            prompt_ids=[list(p) for p in r.prompt_ids],
            group_size=r.group_size,
            completion_ids=[c for g in groups for c in g.completion_ids],
            logprobs=[lp for g in groups for lp in g.logprobs],
            finish_reasons=[why for g in groups for why in g.finish_reasons],
        )
        generated, slot_steps = sum(rollouts.lengths), sum(g.slot_steps for g in groups)
        rollouts.stats = {
            "decode_steps": sum(g.decode_steps for g in groups),
            "prefill_tokens": sum(g.prefill_tokens for g in groups),
            "generated_tokens": generated,
            "slot_utilization": generated / slot_steps if slot_steps else 1.0,
            "kv_bytes_peak": max(g.peak_tokens_held for g in groups) * r.kv_bytes_per_token,
            "num_slots": min(r.num_slots, r.group_size),
        }
        return rollouts


BASELINES = Registry("decoder")
"""The HF decoders by ``SamplerConfig.decoder`` name (every :data:`Decoder` but ``engine``)."""
BASELINES.register("micro_groups")(Baseline(prefill_once=True, whole_group=False))
BASELINES.register("hf_micro")(Baseline(prefill_once=False, whole_group=False))
BASELINES.register("hf_full")(Baseline(prefill_once=False, whole_group=True))
BASELINES.register("hf_cb")(ContinuousBatching())
