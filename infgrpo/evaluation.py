"""Held-out evaluation: decode one completion per prompt and score it with the reward functions."""

from __future__ import annotations

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from infgrpo.rewards import compute_rewards
from infgrpo.runtime.threads import adapt_threads
from infgrpo.sampler import MicroGroupSampler, SamplerConfig


def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    items: list[dict],
    rewards: dict[str, float],
    accuracy_reward: str | None = None,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    batch_size: int = 128,
) -> dict[str, float]:
    """Mean reward (and accuracy: share with ``accuracy_reward >= 1``) over ``items``.

    ``items`` are ``{"prompt_ids": list[int], "meta": dict}`` as produced by the data module;
    ``batch_size`` prompts decode at once. Rewards get ``completion_lengths`` and
    ``max_completion_length`` (= ``max_new_tokens``) like in training.
    """
    cfg = SamplerConfig(max_new_tokens=max_new_tokens, temperature=temperature, keep_pool=False)
    sampler = MicroGroupSampler(model, tokenizer, cfg)
    adapt_threads(model, rows=min(batch_size, len(items)))  # CPU threads: work size, free cores
    out = sampler.generate_one([it["prompt_ids"] for it in items], batch_size=batch_size)
    texts = tokenizer.batch_decode(out.completion_ids, skip_special_tokens=True)
    total, parts = compute_rewards(
        rewards,
        texts,
        [it["meta"] for it in items],
        completion_lengths=out.lengths,
        max_completion_length=max_new_tokens,
    )
    result = {"reward": total.mean().item(), "completion_length": sum(out.lengths) / len(out)}
    if accuracy_reward is not None:
        result["accuracy"] = (parts[accuracy_reward] >= 1.0).float().mean().item()
    return result
