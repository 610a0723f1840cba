"""MicroGroupSampler: G completions per prompt in memory bounded by a pool of ``num_slots``.

    sampler = MicroGroupSampler(model, tokenizer, SamplerConfig(num_slots=8, max_new_tokens=128))
    rollouts = sampler.sample([[1, 5, 7, ...], ...], group_size=32, seed=0)

The sampler knows nothing of Lightning or rewards: token ids in, :class:`Rollouts` out.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from infgrpo.sampler.config import SamplerConfig
from infgrpo.sampler.hf_generate import GroupOutput, decode_group, generate_batch, generation_kwargs
from infgrpo.sampler.rollouts import Rollouts


def kv_bytes_per_token(model: PreTrainedModel) -> int:
    """Bytes of K and V for one token position over all layers of ``model``."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    dtype_size = torch.finfo(model.dtype).bits // 8
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * dtype_size


def max_positions(model: PreTrainedModel) -> int | None:
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return getattr(cfg, "max_position_embeddings", None)


class MicroGroupSampler:
    """Decodes groups of completions in micro-groups of ``config.num_slots`` sequences.

    Args:
        model: a Hugging Face causal LM (plain, peft-wrapped or quantized).
        tokenizer_or_eos: a tokenizer (its ``eos_token_id`` and ``pad_token_id`` are used) or the
            EOS token id itself.
        config: decoding settings; see :class:`SamplerConfig`.
    """

    def __init__(
        self, model: PreTrainedModel, tokenizer_or_eos: PreTrainedTokenizerBase | int, config: SamplerConfig
    ) -> None:
        self.model = model
        self.config = config
        if isinstance(tokenizer_or_eos, int):
            self.eos_id, self.pad_id = tokenizer_or_eos, tokenizer_or_eos
        else:
            self.eos_id = tokenizer_or_eos.eos_token_id
            pad = tokenizer_or_eos.pad_token_id
            self.pad_id = self.eos_id if pad is None else pad
        self.stop_ids = [self.eos_id] + [t for t in config.stop_token_ids if t != self.eos_id]
        self.calls = 0

    # -- validation -------------------------------------------------------------------------
    def check_prompts(self, prompt_ids: list[list[int]]) -> None:
        """Raises a ValueError naming the prompt that is empty or cannot fit the model's context."""
        limit = max_positions(self.model)
        for i, p in enumerate(prompt_ids):
            if len(p) == 0:
                raise ValueError(f"prompt_ids[{i}] is empty; every prompt needs at least one token")
            if limit is not None and len(p) + self.config.max_new_tokens > limit:
                raise ValueError(
                    f"prompt_ids[{i}] has {len(p)} tokens; with max_new_tokens="
                    f"{self.config.max_new_tokens} it needs {len(p) + self.config.max_new_tokens} "
                    f"positions but the model's context (max_position_embeddings) is {limit}. "
                    f"Shorten the prompt or lower max_new_tokens to <= {limit - len(p)}."
                )

    # -- sampling ---------------------------------------------------------------------------
    @torch.no_grad()
    def sample(self, prompt_ids: list[list[int]], group_size: int, seed: int = 0) -> Rollouts:
        """``group_size`` completions of each prompt, prompt-major (see :class:`Rollouts`)."""
        if group_size < 1:
            raise ValueError(f"group_size={group_size} must be >= 1")
        self.check_prompts(prompt_ids)
        cfg = self.config
        was_training = self.model.training
        self.model.eval()
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        kw = generation_kwargs(cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p, self.stop_ids, self.pad_id)
        slots = group_size if cfg.decoder == "hf_full" else cfg.num_slots
        groups: list[GroupOutput] = [
            decode_group(self.model, p, group_size, slots, seed, i, kw, prefill_once=cfg.decoder == "micro_groups")
            for i, p in enumerate(prompt_ids)
        ]
        self.model.train(was_training)
        self.calls += 1
        rollouts = Rollouts(
            prompt_ids=[list(p) for p in prompt_ids],
            group_size=group_size,
            completion_ids=[c for g in groups for c in g.completion_ids],
            logprobs=[lp for g in groups for lp in g.logprobs],
            finish_reasons=[r for g in groups for r in g.finish_reasons],
        )
        rollouts.stats = self._stats(groups, rollouts, time.perf_counter() - start)
        return rollouts

    @torch.no_grad()
    def generate_one(self, prompt_ids: list[list[int]], batch_size: int = 128) -> Rollouts:
        """One completion per prompt, many prompts per batch (for evaluation, e.g. greedy)."""
        self.check_prompts(prompt_ids)
        cfg = self.config
        kw = generation_kwargs(cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p, self.stop_ids, self.pad_id)
        was_training = self.model.training
        self.model.eval()
        start = time.perf_counter()
        groups = [
            generate_batch(self.model, prompt_ids[i : i + batch_size], kw, self.pad_id)
            for i in range(0, len(prompt_ids), batch_size)
        ]
        self.model.train(was_training)
        rollouts = Rollouts(
            prompt_ids=[list(p) for p in prompt_ids],
            group_size=1,
            completion_ids=[c for g in groups for c in g.completion_ids],
            logprobs=[lp for g in groups for lp in g.logprobs],
            finish_reasons=[r for g in groups for r in g.finish_reasons],
        )
        rollouts.stats = self._stats(groups, rollouts, time.perf_counter() - start)
        return rollouts

    def _stats(self, groups: list[GroupOutput], rollouts: Rollouts, wall: float) -> dict[str, Any]:
        generated = sum(rollouts.lengths)
        slot_steps = sum(g.slot_steps for g in groups)
        stats: dict[str, Any] = {
            "decode_steps": sum(g.decode_steps for g in groups),
            "prefill_tokens": sum(g.prefill_tokens for g in groups),
            "generated_tokens": generated,
            "slot_utilization": generated / slot_steps if slot_steps else 0.0,
            "kv_bytes_peak": max(g.peak_tokens_held for g in groups) * kv_bytes_per_token(self.model),
            "wall_time_s": wall,
            "tokens_per_s": generated / wall if wall > 0 else 0.0,
        }
        if torch.cuda.is_available():
            stats["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
        return stats

    # -- checkpointing ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "config": asdict(self.config)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = int(state["calls"])
