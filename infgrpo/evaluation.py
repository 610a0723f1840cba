"""Held-out evaluation: decode one completion per prompt and score it with the reward functions.

    result = evaluate(model, tokenizer, items, {"synthetic": 1.0}, accuracy="synthetic")
    # {"reward": 0.73, "completion_length": 12.4, "accuracy": 0.73}

:func:`score_heldout` is the one scoring path: ``GRPOModule.validation_step`` and :func:`evaluate`
(tutorials, ``bench train-tiny``) both call it. Rewards get ``completion_lengths`` and
``max_completion_length`` (the sampler's ``max_new_tokens``) as in training, through the same
:class:`~infgrpo.scoring.Scorer`; rows no reward applies to (NaN: None values, or failures under
``rewards.on_error: skip``) are left out of the means. The keywords are named as the settings are (``accuracy``:
``rewards.accuracy``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torchmetrics import MeanMetric
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from infgrpo.rewards import correct_rows
from infgrpo.runtime.threads import adapt_threads
from infgrpo.sampler import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.engine.turns import Turns
from infgrpo.scoring import Scorer, Scores
from infgrpo.settings import ConfigError, check_types
from infgrpo.vision.features import forget_features
from infgrpo.vision.inputs import VisionInputs, batch_visions


@dataclass
class EvaluationConfig:
    """Held-out evaluation during fit (``model.evaluation``): one completion per held-out prompt."""

    temperature: float = 0.0
    """Sampling temperature of the held-out completions (0 = greedy); the other decoding settings are the
    sampler's."""

    def __post_init__(self) -> None:
        check_types(self)
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ConfigError(f"temperature={self.temperature!r} must be a finite number >= 0 (0 = greedy)")


def evaluation_sampler_config(sampler: SamplerConfig, evaluation: EvaluationConfig) -> SamplerConfig:
    """The held-out sampler's settings: the training sampler's but ``evaluation.temperature``, FIFO refill, no
    length predictor and no pool kept between calls."""
    return replace(sampler, temperature=evaluation.temperature, refill="fifo", length_predictor="none", keep_pool=False)


class HeldoutMeans(torch.nn.Module):
    """``val/reward`` and ``val/accuracy`` of a validation epoch: the means over its held-out completions (failed
    rewards, NaN under ``skip``, left out), reduced over ranks by torchmetrics when computed."""

    def __init__(self) -> None:
        super().__init__()
        self.reward, self.accuracy = MeanMetric(), MeanMetric()

    def update(self, scores: Scores, accuracy: str | None) -> None:
        """Adds one batch's (N,) totals, and its rows' correctness under the reward ``accuracy`` (None: none)."""
        if not scores.total.isnan().all():
            self.reward.update(scores.total[~scores.total.isnan()])
        correct = correct_rows(scores.parts, accuracy)
        if correct is not None and correct.numel():
            self.accuracy.update(correct)

    def compute(self, accuracy: str | None) -> dict[str, torch.Tensor]:
        """``{"reward": mean, "accuracy": mean}`` (no accuracy without an accuracy reward), then starts afresh."""
        means = {"reward": self.reward.compute()}
        if accuracy is not None:
            means["accuracy"] = self.accuracy.compute()
        with torch.inference_mode(False):  # fresh states usable by any later loop (trainer.validate, then fit)
            self.reward.reset()
            self.accuracy.reset()
        return means


def score_heldout(
    sampler: MicroGroupSampler,
    scorer: Scorer,
    items: list[dict],
    batch_size: int = 128,
    prompt_ids: list[list[int]] | None = None,
    turns: Callable[[], Turns] | None = None,
    visions: list[VisionInputs | None] | None = None,
) -> tuple[Scores, list[int]]:
    """The scores of one completion per item, and their lengths (at most ``batch_size`` decode at once, on the
    slots :meth:`~infgrpo.sampler.MicroGroupSampler.generate_one` plans): the completions decoded, then ``scorer``.

    ``items`` are ``{"prompt_ids": list[int], "meta": dict}`` (and ``"prompt"``: the prompt as the dataset gave
    it, the rewards' ``prompts``) as produced by the data module. A run with tools gives its ``prompt_ids``
    (rendered with the tool schemas) and ``turns`` (:func:`~infgrpo.training.agent_rollout.rollout_inputs`): the
    same path, multi-turn, with the ``visions`` of that rendering. Items with images decode with them: ``visions``
    or else their ``vision`` inputs, which the data module's batches carry (``data.collate(items)``, or its
    ``val_dataloader()``); an item with ``images`` and neither (``data.eval_items`` as they are) is a ConfigError, not
    a decode that leaves its images out.
    """
    if visions is None and any(it.get("images") and it.get("vision") is None for it in items):
        i = next(i for i, it in enumerate(items) if it.get("images") and it.get("vision") is None)
        raise ConfigError(
            f"items[{i}] holds images but no vision inputs: pass the data module's batches (data.collate(items) "
            "or data.val_dataloader()), which process each prompt's images, or with model.agent the visions of "
            "rollout_inputs(agent, items, data)"
        )
    adapt_threads(sampler.model, rows=min(batch_size, len(items)))  # CPU threads: work size, free cores
    prompts = [it["prompt_ids"] for it in items] if prompt_ids is None else prompt_ids
    visions = batch_visions(items) if visions is None else visions
    out = sampler.generate_one(prompts, batch_size=batch_size, turns=turns, vision=visions)
    forget_features(visions)  # the images' features its prefills kept: no update reads them
    return scorer(out, items), out.model_lengths


def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    items: list[dict],
    rewards: dict[str, float],
    accuracy: str | None = None,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    batch_size: int = 128,
    on_error: str = "raise",
    group_by: Callable[[dict], str] | None = None,
) -> dict[str, Any]:
    """Mean reward (and accuracy: the share whose reward ``accuracy`` is >= 1) over ``items``, and the mean length.

    ``accuracy`` and ``on_error`` are the settings ``rewards.accuracy`` and ``rewards.on_error``. ``batch_size``
    prompts decode at once, each on its own slot. ``group_by(meta)`` names each item's kind (e.g. the task of a
    mixed dataset): the result then also has ``accuracy_by``, ``{kind: [right, items]}``.
    """
    cfg = SamplerConfig(num_slots=batch_size, max_new_tokens=max_new_tokens, temperature=temperature, keep_pool=False)
    scorer = Scorer(tokenizer, rewards, on_error, max_new_tokens)
    scores, lengths = score_heldout(MicroGroupSampler(model, tokenizer, cfg), scorer, items, batch_size)
    result = {"reward": scores.total.nanmean().item(), "completion_length": sum(lengths) / len(lengths)}
    correct = correct_rows(scores.parts, accuracy)
    if correct is not None:
        result["accuracy"] = correct.mean().item()
        if group_by is not None:
            result["accuracy_by"] = accuracy_by(items, scores.parts[accuracy], group_by)
    return result


def accuracy_by(items: list[dict], values: torch.Tensor, group_by: Callable[[dict], str]) -> dict[str, list[int]]:
    """``{kind: [right answers, scored items]}`` of ``items`` by ``group_by(meta)``, from the accuracy reward's
    ``values`` (N,) (failed, NaN, values left out, as :func:`~infgrpo.rewards.correct_answers` does)."""
    by: dict[str, list[int]] = {}
    for item, value in zip(items, values.tolist(), strict=True):
        if not math.isnan(value):
            counts = by.setdefault(group_by(item["meta"]), [0, 0])
            counts[0], counts[1] = counts[0] + int(value >= 1.0), counts[1] + 1
    return dict(sorted(by.items()))
