"""Dynamic sampling in a training step (``model.dynamic_sampling``): groups judged by their rewards as they end.

    dynamic = DynamicSampling(DynamicSamplingConfig(enabled=True), sampler, scorer, group_size=8)
    rollouts, scores, items = dynamic.rollout(batch, seed, datamodule, ranks)

The step's batch (``data.batch_size`` prompts) comes first, then the data module's prompt stream
(:meth:`~infgrpo.data.PromptDataModule.prompt_stream`); the sampler draws from them as its slots free up
(:mod:`infgrpo.sampler.engine.dynamic`). When a group's last completion ends, its rewards are computed right there
and ``criterion`` says whether it carries a gradient; a dropped group's place goes to the next prompt, until
the step holds ``data.batch_size`` informative groups or ``max_prompts`` prompts were drawn. **What a step
means then:** an optimizer step (``num_iterations`` of them) on ``data.batch_size`` groups, the informative
ones found among the batch and the prompts drawn after it; ``batch_size`` is the number of groups trained
on, not of prompts seen; an epoch still counts the batches Lightning hands in (the stream is extra and
endless, with its own order), so a step sees more prompts than its batch and an epoch more than the data.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from infgrpo.registry import Registry
from infgrpo.runtime.ranks import Ranks
from infgrpo.sampler import DynamicSpec, DynamicSummary, MicroGroupSampler, Rollouts
from infgrpo.sampler.engine.dynamic import Scheme
from infgrpo.settings import ConfigError, check_types
from infgrpo.training.scoring import Scorer, Scores

CRITERIA = Registry("dynamic_sampling.criterion")
"""Whether a scored group carries a gradient: ``criterion(scores) -> bool`` on the group's :class:`Scores`."""
WARN_AFTER = 3  # consecutive capped steps before the warning


@CRITERIA.register("reward_spread")
def reward_spread(scores: Scores) -> bool:
    """DAPO's filter: the group's rewards are not all equal (failed ones, NaN, left out); equal rewards give
    every completion advantage 0."""
    values = scores.total[~scores.total.isnan()]
    return len(values) >= 2 and bool(values.max() > values.min())


@dataclass
class DynamicSamplingConfig:
    """Dynamic sampling (DAPO): replace the groups whose rewards are all equal during the rollout."""

    enabled: bool = False
    """Draw prompts while decoding and keep sampling until the step holds ``data.batch_size`` groups with a
    reward spread (or ``max_prompts`` were drawn); see :mod:`infgrpo.training.dynamic`."""
    max_prompts: int | None = None
    """Most prompts drawn in one step (per rank; >= ``data.batch_size``). At the cap the step trains on the
    informative groups it found and, for the rest, the groups it dropped last (no gradient: the update skips
    them). null: 4 x ``data.batch_size``."""
    criterion: str = "reward_spread"
    """Which finished groups are kept: ``reward_spread`` (rewards not all equal, DAPO's) or an importable
    ``module.path:function`` taking the group's scores (``.total``: (G,) rewards, ``.parts``: each reward's)
    and returning a bool."""
    scheme: Scheme = "continuous"
    """``continuous``: a prompt is drawn as slots free up and the rollout ends when the batch is full
    (in-flight completions cancelled); ``rounds``: verl's scheme, whole batches decoded and filtered in turn
    (the baseline of ``bench dynamic``)."""

    def __post_init__(self) -> None:
        check_types(self)
        if self.max_prompts is not None and self.max_prompts < 1:
            raise ConfigError(f"max_prompts={self.max_prompts} must be >= 1 (or null: 4 x data.batch_size)")
        resolve_criterion(self.criterion)

    def cap(self, batch_size: int) -> int:
        """The cap for steps of ``batch_size`` prompts; a ConfigError when it is below the batch size."""
        cap = self.max_prompts if self.max_prompts is not None else 4 * batch_size
        if cap < batch_size:
            raise ConfigError(
                f"dynamic_sampling.max_prompts={cap} is below data.batch_size={batch_size}: a step needs at least "
                "its batch size in prompts"
            )
        return cap


def resolve_criterion(name: str) -> Callable[[Scores], bool]:
    """The criterion called ``name``: a registered one or ``module.path:function``; a ConfigError otherwise."""
    return CRITERIA.resolve(name)


def concat_scores(parts: list[Scores]) -> Scores:
    """The scores of several groups, in order, as one :class:`Scores`."""
    cat = torch.cat
    return Scores(
        total=cat([p.total for p in parts]), lengths=cat([p.lengths for p in parts]),
        truncated=cat([p.truncated for p in parts]), failed=cat([p.failed for p in parts]),
        parts={k: cat([p.parts[k] for p in parts]) for k in parts[0].parts},
        texts=[t for p in parts for t in (p.texts or [])],
    )  # fmt: skip


class DynamicSampling:
    """A step's dynamic rollout and its scores (see the module docstring)."""

    def __init__(
        self,
        config: DynamicSamplingConfig,
        sampler: MicroGroupSampler,
        scorer: Scorer,
        group_size: int,
    ) -> None:
        self.config, self.sampler, self.scorer, self.g = config, sampler, scorer, group_size
        self.criterion = resolve_criterion(config.criterion)
        self.capped_in_a_row = 0

    def check(self, datamodule: Any) -> None:
        """Before the first step: the data module can stream prompts, and the cap is not below its batch size."""
        if not hasattr(datamodule, "prompt_stream"):
            raise ValueError(
                "dynamic_sampling.enabled needs a data module with prompt_stream() (infgrpo.data.PromptDataModule) "
                f"to draw prompts beyond the batch; got {type(datamodule).__name__}"
            )
        self.config.cap(datamodule.hparams.batch_size)

    def rollout(
        self, batch: list[dict], seed: int, datamodule: Any, ranks: Ranks
    ) -> tuple[Rollouts, Scores, list[dict]]:
        """The rollout of this rank's share, its scores and its items (the prompts trained on, in order)."""
        cap = self.config.cap(len(batch))
        items: list[dict] = []
        scored: dict[int, Scores] = {}

        def source() -> Iterator[list[int]]:
            for item in itertools.chain(batch, datamodule.prompt_stream()):
                items.append(item)
                yield item["prompt_ids"]

        def keep(position: int, group: list) -> bool:
            one = Rollouts(
                [items[position]["prompt_ids"]], self.g, [s.token_ids for s in group], [s.logprobs for s in group],
                [s.finish_reason for s in group],
            )  # fmt: skip
            scored[position] = self.scorer(one, [items[position]["meta"]])
            return bool(self.criterion(scored[position]))

        spec = DynamicSpec(len(batch), cap, keep, scheme=self.config.scheme, round_size=len(batch))
        rollouts = self.sampler.sample_dynamic(
            source(), self.g, seed, spec, datamodule.longest_prompt(), prompt_offset=ranks.rank * cap, ranks=ranks
        )
        self.warn_if_capped(rollouts.dynamic, cap)
        chosen = rollouts.drawn or []
        return rollouts, concat_scores([scored[i] for i in chosen]), [items[i] for i in chosen]

    def warn_if_capped(self, found: DynamicSummary, cap: int) -> None:
        """Warns once the cap was hit :data:`WARN_AFTER` steps in a row (a reward that rarely varies)."""
        self.capped_in_a_row = self.capped_in_a_row + 1 if found.capped else 0
        if self.capped_in_a_row == WARN_AFTER:
            warnings.warn(
                f"[infgrpo] dynamic sampling hit dynamic_sampling.max_prompts={cap} {WARN_AFTER} steps in a row: "
                f"only {found.informative_rate:.0%} of the groups had a reward spread in the last step "
                "(a reward that never varies on these prompts, or a task too hard or too easy for the model); "
                "those steps trained on dropped groups, which carry no gradient",
                stacklevel=3,
            )
