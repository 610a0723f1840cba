"""transformers' own continuous batching (``model.generate_batch``) as the decoder ``hf_cb``: the in-process peer.

    MicroGroupSampler(model, tokenizer, SamplerConfig(decoder="hf_cb", num_slots=16)).sample(prompts, 32, seed=0)
    rollouts = BASELINES.get("hf_cb")(model, DecodeRequest(prompt_ids, group_size, num_slots, seed, 0, kw, kv))

What TRL 1.16 runs with ``use_transformers_continuous_batching=True``: ``generate_batch`` decodes in
a background thread over a paged K/V cache, schedules requests first in, first out, packs prefill
chunks and decode tokens of several sequences into each forward, and (with ``num_return_sequences=G``)
prefills a prompt once and forks its K/V into the G samples.

The sampler's settings, as transformers takes them:

- ``num_slots`` -> ``ContinuousBatchingConfig.max_requests_per_batch`` (sequences in one forward: the
  engine's slots) and ``num_blocks``: K/V blocks of ``page_size`` (256) tokens for ``num_slots``
  sequences of the longest prompt + ``max_new_tokens``, the memory of the engine's pool rounded up to
  whole pages. More sequences than that may be active at once (a forked sample first needs one block);
  when the cache runs short, transformers sets sequences aside and prefills them again later.
  ``safety_margin`` is 0: with the cache sized to the slots, the scheduler's default reserve (no new
  prefill while under 15% of the blocks are free) kept the last slots idle (2 prompts x 4 samples x 16
  tokens on 4 slots: 49 steps, against 34 without it; lower bound 32).
- ``max_batch_tokens`` (tokens in one forward) = every prompt's tokens + ``num_slots``: one step can
  prefill all prompts beside a token for each slot, and the attention mask transformers preallocates
  (tokens x (cache + tokens), for eager and sdpa) stays small; its default, 8,192 tokens, makes that
  mask at least 8,192 x 8,192 values (128 MiB in bfloat16).
- ``max_new_tokens``, ``temperature``, ``top_k``, ``top_p``, the stop ids (``eos_token_id``) and the pad id
  -> ``GenerationConfig`` (temperature, then top-k, then top-p, as ``generate`` applies them).
- ``seed`` -> ``ContinuousBatchingConfig.seed = derive_seed(seed, prompt_offset)``: one stream for the rollout.

How it differs from the other decoders (``SamplerConfig.decoder`` says so too):

- **log-probs after filtering**: transformers returns the log of the softmax of the processed logits
  (after temperature, top-k and top-p), the other decoders the log-softmax at the temperature before
  top-k / top-p (what the training forward computes). They agree when ``top_k=0`` and ``top_p=1``.
- **not schedule-invariant**: every sample draws from torch's global generator inside batches the
  scheduler composes, so a completion depends on ``num_slots``, on the other prompts of the rollout and
  on the order of work, not only on (seed, prompt, sample index). One seed repeats a rollout in practice.
- **greedy** (temperature 0): transformers allows ``num_return_sequences > 1`` only when sampling, so each
  prompt is submitted G times instead (prefix caching shares its full K/V blocks).

``generate_batch`` also changes process state: it puts the model in eval mode, may switch its
attention implementation for the call (transformers switches it back) and reseeds torch's global RNG.
This decoder restores every module's training flag and the CPU and CUDA RNG states, so a training run
that uses it is not perturbed. Each call builds its paged cache anew (on CUDA it may also capture
graphs), as TRL's call does every step; the sampler's wall time includes it.

Its stats: ``decode_steps`` (transformers' generation steps: forwards, prefill chunks included),
``kv_bytes_peak`` (the paged cache allocated, held for the whole call), ``num_slots``
(``max_requests_per_batch``), ``cb_num_blocks``, ``cb_max_batch_tokens``.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers import ContinuousBatchingConfig, GenerationConfig, PreTrainedModel

from infgrpo.runtime.seeds import derive_seed
from infgrpo.sampler.hf.request import DecodeRequest
from infgrpo.sampler.model_support import text_config
from infgrpo.sampler.rollouts import Rollouts

PAGE_SIZE = 256
"""Tokens of one K/V block (``ContinuousBatchingConfig.page_size``, transformers' default)."""
CB_ATTENTION = ("eager", "sdpa", "paged|eager", "paged|sdpa")
"""Attention implementations transformers' continuous batching runs, besides flash attention."""
CB_LAYER_TYPES = ("full_attention", "sliding_attention")
"""Layer types its paged cache holds."""


def refusal(model: torch.nn.Module) -> str | None:
    """Why transformers' continuous batching cannot decode with ``model``; None when it can."""
    if getattr(model, "generate_batch", None) is None:
        return f"{type(model).__name__} has no generate_batch (it needs a transformers >= 5.8 causal LM)"
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl not in CB_ATTENTION and "flash" not in impl:
        return f"attn_implementation={impl!r}: transformers' continuous batching runs eager, sdpa or flash attention"
    odd = sorted(set(getattr(text_config(model.config), "layer_types", None) or ()) - set(CB_LAYER_TYPES))
    if odd:
        return f"layer types {odd}: transformers' paged cache holds only {', '.join(CB_LAYER_TYPES)} layers"
    return None


def generation_config(gen_kwargs: dict, group_size: int) -> GenerationConfig:
    """The ``generate`` kwargs of the sampler's settings as a GenerationConfig; sampling forks G samples a prompt."""
    kw = {k: v for k, v in gen_kwargs.items() if k != "return_dict_in_generate"}
    return GenerationConfig(**kw, num_return_sequences=group_size if kw.get("do_sample") else 1)


def batching_config(
    prompt_ids: list[list[int]], num_slots: int, max_new_tokens: int, seed: int
) -> ContinuousBatchingConfig:
    """``num_slots`` as transformers' batch and cache sizes (see the module docstring), log-probs on, seeded."""
    blocks_per_sequence = math.ceil((max(map(len, prompt_ids)) + max_new_tokens) / PAGE_SIZE)
    return ContinuousBatchingConfig(
        page_size=PAGE_SIZE,
        num_blocks=num_slots * blocks_per_sequence,
        max_requests_per_batch=num_slots,
        max_batch_tokens=sum(map(len, prompt_ids)) + num_slots,
        safety_margin=0.0,
        return_logprobs=True,
        seed=seed,
    )


class _DropPersistentNote(logging.Filter):
    """Drops transformers' warning that a persistent manager stays alive: this decoder destroys it at once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Since you passed `persistent_manager=True`")


@contextlib.contextmanager
def restored_state(model: torch.nn.Module) -> Iterator[None]:
    """Every module's training flag and torch's CPU and CUDA RNG states, as they were before the block."""
    modes = {m: m.training for m in model.modules()}
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        for m, mode in modes.items():
            m.training = mode  # the flag alone: ``train(mode)`` would set every child to its parent's mode


def run_generate_batch(
    model: PreTrainedModel, inputs: list[list[int]], gen: GenerationConfig, cb: ContinuousBatchingConfig
) -> tuple[list[Any], dict[str, int]]:
    """``model.generate_batch(inputs, ...)``: its outputs in input order (a prompt's samples together), and its sizes.

    The manager is kept past the call (``persistent_manager``) only to read what it ran (steps, cache
    sizes), then destroyed, which frees its paged cache.
    """
    run = model.generate_batch  # on a peft wrapper, the base model's method: the base model keeps the manager
    owner = run.__self__
    if getattr(owner, "_cached_continuous_batching_manager", None) is not None:
        raise ValueError(
            "decoder='hf_cb': the model holds a persistent continuous batching manager of its own, which "
            "generate_batch would reuse with its own settings; call "
            "model.destroy_cached_continuous_batching_manager() first"
        )
    cb_logger, note = logging.getLogger("ContinuousBatchingLogger"), _DropPersistentNote()
    cb_logger.addFilter(note)
    try:
        with restored_state(model):
            outputs = run(
                inputs,
                generation_config=gen,
                continuous_batching_config=cb,
                progress_bar=False,
                persistent_manager=True,
            )
        manager = getattr(owner, "_cached_continuous_batching_manager", None)
        processor = getattr(manager, "batch_processor", None)
        sizes = {}
        if processor is not None:
            cache = processor.cache
            sizes = {
                "steps": manager.current_batch,
                "kv_bytes": cache.cache_tensor.numel() * cache.cache_tensor.element_size(),
                "slots": processor.scheduler.max_requests_per_batch,
                "num_blocks": cache.num_blocks,
                "max_batch_tokens": cache.max_batch_tokens,
            }
    finally:
        cb_logger.removeFilter(note)
        owner.destroy_cached_continuous_batching_manager()
    return list(outputs.values()), sizes


def check_outputs(outputs: list[Any], inputs: list[list[int]], per_input: int) -> None:
    """A RuntimeError unless every input has ``per_input`` finished outputs, in order, with a log-prob per token."""
    expected = len(inputs) * per_input
    failed = [o for o in outputs if o.error is not None]
    if failed or len(outputs) != expected:
        cause = f"; first error: {failed[0].error}" if failed else " (see the ContinuousBatchingLogger errors above)"
        raise RuntimeError(
            f"decoder='hf_cb': transformers' generate_batch returned {len(outputs) - len(failed)} of {expected} "
            f"completions{cause}"
        )
    for i, out in enumerate(outputs):
        if list(out.prompt_ids) != list(inputs[i // per_input]) or len(out.logprobs) != len(out.generated_tokens):
            raise RuntimeError(
                f"decoder='hf_cb': output {i} ({out.request_id}) is not a completion of input {i // per_input} "
                "with one log-prob per token; transformers' generate_batch changed its output order or fields"
            )


@dataclass(frozen=True)
class ContinuousBatching:
    """The decoder ``hf_cb``: a rollout through transformers' ``generate_batch`` (see the module docstring)."""

    whole_group: bool = False
    """Sized like the engine: the sampler passes its ``num_slots`` (fixed or 'auto'), not the group size."""

    def __call__(self, model: PreTrainedModel, r: DecodeRequest) -> Rollouts:
        """``r.group_size`` completions of each prompt, prompt-major; stats as the other decoders report them.

        ``r.kv_bytes_per_token`` is not needed: the K/V bytes are those of the paged cache transformers allocated.
        """
        group_size = r.group_size
        reason = refusal(model)
        if reason is not None:
            raise ValueError(f"decoder='hf_cb' cannot run: {reason}")
        gen = generation_config(r.gen_kwargs, group_size)
        # 1) sampling forks each prompt's K/V into its G samples; greedy submits each prompt G times
        copies = 1 if gen.do_sample else group_size
        inputs = [list(p) for p in r.prompt_ids for _ in range(copies)]
        slots = min(r.num_slots, len(r.prompt_ids) * group_size)
        cb = batching_config(r.prompt_ids, slots, gen.max_new_tokens, derive_seed(r.seed, r.prompt_offset))
        # 2) decode, with the process state restored afterwards
        outputs, sizes = run_generate_batch(model, inputs, gen, cb)
        check_outputs(outputs, inputs, group_size // copies)
        # 3) the outputs as Rollouts, prompt-major (generate_batch keeps a prompt's samples together, in input order)
        stop_ids = set(r.gen_kwargs["eos_token_id"])
        ids = [list(o.generated_tokens) for o in outputs]
        rollouts = Rollouts(
            prompt_ids=[list(p) for p in r.prompt_ids],
            group_size=group_size,
            completion_ids=ids,
            logprobs=[torch.tensor(o.logprobs, dtype=torch.float32) for o in outputs],
            finish_reasons=["stop" if c and c[-1] in stop_ids else "length" for c in ids],
        )
        generated, steps = sum(rollouts.lengths), sizes.get("steps", 0)
        rollouts.stats = {
            "decode_steps": steps,
            "generated_tokens": generated,
            "slot_utilization": generated / (steps * sizes["slots"]) if steps else 1.0,
            "kv_bytes_peak": sizes.get("kv_bytes", 0),
            "num_slots": sizes.get("slots", slots),
            "cb_num_blocks": sizes.get("num_blocks", cb.num_blocks),
            "cb_max_batch_tokens": sizes.get("max_batch_tokens", cb.max_batch_tokens),
        }
        return rollouts
