"""Dynamic sampling in a training step (``model.dynamic_sampling``): groups judged by their rewards as they end.

    config = DynamicSamplingConfig(enabled=True)            # the step's rollout: infgrpo.training.judged_rollout

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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from infgrpo.registry import Registry
from infgrpo.rewards.returns import abbreviated
from infgrpo.sampler.engine.plan import Scheme
from infgrpo.scoring import Scores
from infgrpo.settings import ConfigError, check_types

CRITERIA = Registry("dynamic_sampling.criterion")
"""Whether a scored group carries a gradient: ``criterion(scores) -> bool`` on the group's :class:`Scores`."""


class CriterionError(ValueError):
    """A ``dynamic_sampling.criterion`` raised, or returned something other than a bool."""


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


def judge(criterion: Callable[[Scores], object], name: str, scores: Scores) -> bool:
    """``criterion(scores)`` (the criterion called ``name``) as a bool; a :class:`CriterionError` naming it when it
    raises or returns anything but a bool (Python's, numpy's or a 0-dim bool tensor): ``"no"`` or a count would
    otherwise be read as true and keep every group."""
    field = f"dynamic_sampling.criterion {name!r}"
    try:
        verdict = criterion(scores)
    except Exception as err:
        raise CriterionError(f"{field} raised {type(err).__name__}: {err}") from err
    if isinstance(verdict, bool | np.bool_):
        return bool(verdict)
    if isinstance(verdict, torch.Tensor) and verdict.dim() == 0 and verdict.dtype == torch.bool:
        return bool(verdict)
    raise CriterionError(
        f"{field} returned {type(verdict).__name__} {abbreviated(verdict)}; it must return a bool (True: the group "
        "carries a gradient and is kept), e.g. bool(scores.total.max() > scores.total.min())"
    )
