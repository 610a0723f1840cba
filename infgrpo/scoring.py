"""Scoring a rollout (training's, or the held-out evaluation's): decode, reward, and gather what the batch-wide
statistics need from every rank.

    scorer = Scorer(tokenizer, {"synthetic": 1.0}, on_error="raise", max_completion_length=max_new_tokens)
    scores = scorer(rollouts, items)   # this rank, (N,): score_rollouts with the run's reward settings
    batch = scores.gather(ranks)       # all ranks, (N_global,)

Group advantages need only this rank's rewards (a group never spans ranks); the batch-wide reward std
of ``scale_rewards: batch`` and the logged metrics need every rank's rows, gathered in global order
(:meth:`~infgrpo.runtime.ranks.Ranks.gather`) in one collective call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from infgrpo.rewards import TrainerState, score_rewards
from infgrpo.runtime.ranks import Ranks
from infgrpo.sampler import Rollouts

Source = tuple[Callable[..., Any], float]
"""A reward function given as it is, with its weight (an environment's ``get_reward``, weight 1)."""


@dataclass
class BatchScores:
    """Per-completion scores of the whole global batch (every rank's rows in global order), each (N_global,)."""

    total: torch.Tensor
    """Weighted reward (NaN: unscorable, no reward function applied; see :mod:`infgrpo.rewards.core`)."""
    lengths: torch.Tensor
    """Completion lengths in tokens the model generated (a multi-turn rollout's tool results left out, as TRL's
    ``completions/*_length``)."""
    truncated: torch.Tensor
    """1.0 where the completion hit ``max_new_tokens`` (:attr:`~infgrpo.sampler.Rollouts.truncated`: finish reason
    ``length``, or ending in a tool result, TRL's ``completions/clipped_ratio``)."""
    failed: torch.Tensor
    """1.0 where at least one reward function failed."""
    parts: dict[str, torch.Tensor]
    """Each reward function's values."""


@dataclass
class Scores(BatchScores):
    """This rank's scores (N,), the decoded completions they were computed from, and what the rewards logged."""

    texts: list[str] | None = None
    extra: dict[str, list[Any]] = field(default_factory=dict)
    """Completion-table columns the rewards logged (``log_extra``), one value per completion."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Scalars the rewards logged (``log_metric``), each the mean of its values: ``train/<name>``."""

    def gather(self, ranks: Ranks) -> BatchScores:
        """Every rank's scores in global order (one collective call; this rank's own on one process)."""
        names = list(self.parts)
        columns = [self.total, self.lengths, self.truncated, self.failed, *self.parts.values()]
        table = ranks.gather(torch.stack(columns, dim=1))  # (N_global, 4 + parts)
        parts = {name: table[:, 4 + i] for i, name in enumerate(names)}
        return BatchScores(table[:, 0], table[:, 1], table[:, 2], table[:, 3], parts)


@dataclass(frozen=True)
class Scorer:
    """How a run scores a rollout: the completions decoded by ``tokenizer`` and rewarded by ``rewards``.

    Built once by ``GRPOModule`` from ``model.rewards``, the sampler's ``max_new_tokens`` and, with
    ``model.agent``, the environments' rewards; the plain rollout, dynamic sampling's judge of each ended group
    (:mod:`infgrpo.training.dynamic`) and the held-out evaluation (:func:`~infgrpo.evaluation.score_heldout`) all call
    it. A multi-turn rollout is scored as TRL scores a tool run, from what its turns recorded
    (``Rollouts.exchanges``): the rewards get each exchange as the completion and, with environments,
    ``environments=``.
    """

    tokenizer: PreTrainedTokenizerBase
    """Decodes the completions (special tokens skipped)."""
    rewards: dict[str, float]
    """Reward functions by name (registered or ``module:function``) and their weights (``rewards.functions``)."""
    on_error: str
    """What a failed reward does: raise, zero or skip (``rewards.on_error``)."""
    max_completion_length: int
    """What the rewards are told the length cap is (the sampler's ``max_new_tokens``)."""
    trainer_state: Callable[[], TrainerState] | None = None
    """The run's progress when a rollout is scored (TRL's ``trainer_state``); None: step 0."""
    sources: Mapping[str, Source] = field(default_factory=dict)
    """More rewards by name, given as functions with their weights: an environment's ``get_reward`` (named after its
    class, weight 1, as TRL adds it). A ValueError when one has a reward function's name."""

    def __post_init__(self) -> None:
        clash = next((name for name in self.sources if name in self.rewards), None)
        if clash is not None:
            raise ValueError(
                f"the reward source {clash!r} has the name of a reward function ({', '.join(self.rewards)}); each "
                "reward needs its own name (its values are logged as rewards/<name>)"
            )

    def __call__(self, rollouts: Rollouts, items: list[dict]) -> Scores:
        """The scores of ``rollouts``; ``items[p]`` is prompt p's data item (see :func:`score_rollouts`)."""
        state = self.trainer_state() if self.trainer_state is not None else None
        rewards = {**self.rewards, **self.sources}
        return score_rollouts(
            self.tokenizer, rollouts, items, rewards, self.on_error, self.max_completion_length, state
        )


def exchange_inputs(rollouts: Rollouts) -> tuple[list[Any] | None, dict[str, list[Any]] | None]:
    """(the completions, the extra keyword arguments) TRL's rewards get for a multi-turn rollout, from what its turns
    recorded (``rollouts.exchanges``, each with ``messages`` and ``environment``): each exchange's messages and, when
    the samples had environments, ``environments=``; (None, None) for a single-turn rollout."""
    if rollouts.exchanges is None:
        return None, None
    environments = [x.environment for x in rollouts.exchanges]
    kwargs = {"environments": environments} if any(e is not None for e in environments) else None
    return [x.messages for x in rollouts.exchanges], kwargs


def entry_prompts(rollouts: Rollouts, items: list[dict]) -> list[Any]:
    """Each completion's prompt as TRL's rewards get it: its row's as the dataset gave it, or with an environment the
    prompt it decoded (the observation appended: the exchange's ``prompt``)."""
    rows = [items[i].get("prompt", items[i]["meta"].get("prompt")) for i in rollouts.prompt_index]
    if rollouts.exchanges is None:
        return rows
    recorded = [getattr(x, "prompt", None) for x in rollouts.exchanges]
    return [row if own is None else own for row, own in zip(rows, recorded, strict=True)]


def score_rollouts(
    tokenizer: PreTrainedTokenizerBase,
    rollouts: Rollouts,
    items: list[dict],
    rewards: Mapping[str, float | Source],
    on_error: str,
    max_completion_length: int,
    trainer_state: TrainerState | None = None,
    *,
    completions: list[Any] | None = None,
    reward_kwargs: dict[str, list[Any]] | None = None,
) -> Scores:
    """Decodes the completions and scores them with ``rewards`` in TRL's convention (names and weights, or a function
    given as it is with its weight: see :func:`~infgrpo.rewards.score_rewards`); ``items[p]`` is prompt p's data item:
    its row (``meta``, every column by name) and its prompt as the dataset gave it (``prompt``).

    A multi-turn rollout (tools) gives what TRL hands its rewards: ``completions`` (each completion's exchange, the
    message list the rewards get as ``completions``; the texts are still decoded, for the logs) and ``reward_kwargs``
    (more keyword arguments, one value per completion: ``environments=``), by default from ``rollouts.exchanges``
    (:func:`exchange_inputs`). Its lengths count the model's tokens only, its truncation is TRL's
    (:attr:`~infgrpo.sampler.Rollouts.truncated`); the rewards' ``completion_ids`` and ``completion_lengths`` hold
    every completion token, tool results included (TRL's ``completion_ids``).
    """
    recorded, recorded_kwargs = exchange_inputs(rollouts)
    completions = recorded if completions is None else completions
    reward_kwargs = recorded_kwargs if reward_kwargs is None else reward_kwargs
    texts = tokenizer.batch_decode(rollouts.completion_ids, skip_special_tokens=True)
    of = rollouts.prompt_index
    scored = score_rewards(
        rewards,
        texts,
        [items[i]["meta"] for i in of],
        on_error,
        completion_lengths=rollouts.lengths,
        max_completion_length=max_completion_length,
        prompts=entry_prompts(rollouts, items),
        completion_ids=[list(ids) for ids in rollouts.completion_ids],
        trainer_state=trainer_state,
        messages=completions,
        reward_kwargs=reward_kwargs,
    )
    dtype = scored.total.dtype
    return Scores(
        total=scored.total,
        lengths=torch.tensor(rollouts.model_lengths, dtype=dtype),
        truncated=torch.tensor(rollouts.truncated, dtype=dtype),
        failed=scored.failed.to(dtype),
        parts=scored.parts,
        texts=texts,
        extra=dict(scored.log.extra),  # one value per completion (score_rewards checks)
        metrics=scored.log.means(),
    )


def trainer_state(trainer: Any) -> TrainerState:
    """A Lightning ``trainer``'s progress as TRL's reward functions read it: ``global_step``, ``max_steps`` and the
    fractional ``epoch`` (steps over batches an epoch); a fresh :class:`TrainerState` without a trainer."""
    if trainer is None:
        return TrainerState()
    batches = trainer.num_training_batches
    finite = isinstance(batches, int) and batches > 0
    epoch = trainer.global_step / batches if finite else trainer.current_epoch
    return TrainerState(trainer.global_step, trainer.max_steps, float(epoch))
