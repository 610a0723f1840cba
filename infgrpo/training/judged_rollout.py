"""A step's rollout whose groups are judged by their rewards as they end: dynamic sampling, adaptive groups, or both.

    rollout = JudgedRollout(dynamic_config, adaptive_config, sampler, scorer, group_size=8, accuracy="synthetic")
    rollouts, scores, items = rollout(batch, seed, datamodule, ranks)
    JudgedRollout(dynamic_config, adaptive_config, sampler, scorer, 8, agent=agent)   # with tools (model.agent)

:class:`GroupJudge` is the one object the engine asks about groups (spread, level, select). It scores a group the
moment its last queued sample ends (every sample so far: a group that grows is judged again), says whether it has
a spread (``dynamic_sampling.criterion``), picks the samples a grown group trains on
(:func:`~infgrpo.algo.down_sample.max_variance_subset` of its rewards) and keeps the scores and its picks, so the
step's :class:`~infgrpo.scoring.Scores` are those the judge computed, of the rows it chose: never a second
scoring, and nothing mapped back from the sampler.

With tools (``model.agent``), the samples are multi-turn: the engine ends a group only after its samples' last
turns, and each finished sample carries what its turns recorded (``Sequence.record``: its exchange and its
environment), so the judge scores an ended group as the plain rollout's scorer would (the exchanges as completions,
``environments=``, the environments' ``get_reward``). Dynamic sampling renders each drawn prompt with the tool
schemas (and resets its environments) as it is drawn; adaptive groups' extra samples get their environments when
they first need them. The rollout's tool counts cover every sample decoded, kept or dropped (``Rollouts.tools``).
See :mod:`infgrpo.training.dynamic` (what a step means with dynamic sampling) and
:mod:`infgrpo.training.adaptive` (adaptive groups, and the combination).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from infgrpo.algo.down_sample import max_variance_subset
from infgrpo.rewards import correct_answers
from infgrpo.runtime.ranks import Ranks
from infgrpo.sampler import AdaptiveSummary, DynamicSpec, DynamicSummary, MicroGroupSampler, Rollouts
from infgrpo.sampler.engine.turns import Turns
from infgrpo.sampler.schedule.sequence import Sequence
from infgrpo.scoring import Scorer, Scores
from infgrpo.settings import InfgrpoWarning
from infgrpo.training.adaptive import AdaptiveGroupsConfig
from infgrpo.training.agent_rollout import AgentRollout, prompt_format
from infgrpo.training.dynamic import DynamicSamplingConfig, judge, resolve_criterion
from infgrpo.training.settings_checks import check_judged_batch
from infgrpo.training.step_rollout import sample_batch
from infgrpo.vision.inputs import VisionInputs

if TYPE_CHECKING:
    from infgrpo.training.hparams import ModuleSettings

WARN_AFTER = 3  # consecutive capped steps before the warning


def concat_scores(parts: list[Scores]) -> Scores:
    """The scores of several groups, in order, as one :class:`Scores`."""
    cat = torch.cat
    return Scores(
        total=cat([p.total for p in parts]), lengths=cat([p.lengths for p in parts]),
        truncated=cat([p.truncated for p in parts]), failed=cat([p.failed for p in parts]),
        parts={k: cat([p.parts[k] for p in parts]) for k in parts[0].parts},
        texts=[t for p in parts for t in (p.texts or [])],
        extra={k: [v for p in parts for v in p.extra.get(k, [None] * len(p.total))] for k in parts[0].extra},
        metrics={k: sum(p.metrics[k] for p in parts if k in p.metrics) / sum(k in p.metrics for p in parts)
                 for k in dict.fromkeys(k for p in parts for k in p.metrics)},
    )  # fmt: skip


def take_scores(scores: Scores, rows: list[int]) -> Scores:
    """The scores of ``rows`` (indices into ``scores``), in that order."""
    idx = torch.tensor(rows, dtype=torch.long)
    return Scores(
        total=scores.total[idx], lengths=scores.lengths[idx], truncated=scores.truncated[idx],
        failed=scores.failed[idx], parts={k: v[idx] for k, v in scores.parts.items()},
        texts=[scores.texts[i] for i in rows] if scores.texts is not None else None,
        extra={k: [v[i] for i in rows] for k, v in scores.extra.items()}, metrics=scores.metrics,
    )  # fmt: skip


@dataclass
class JudgedAdaptiveSummary(AdaptiveSummary):
    """What adaptive groups did (the engine's :class:`~infgrpo.sampler.AdaptiveSummary`) and what the judge's rewards
    say of it (``adaptive/<field>`` too, summed over ranks), with an accuracy reward (``rewards.accuracy``)."""

    prompts_without_right_at_g: int
    """Prompts whose first ``group_size`` samples held no right answer."""
    right_answers_found: int
    """The right answers the later samples of those prompts found."""


class GroupJudge:
    """Scores each ended group of one rollout and remembers it, and the samples it picked of a grown group (see the
    module docstring; the engine's :class:`~infgrpo.sampler.engine.plan.Judge`).

    ``items`` grows as the rollout draws prompts (position -> the data module's item).
    """

    def __init__(self, scorer: Scorer, criterion: str, items: list[dict]) -> None:
        self.scorer, self.name, self.criterion, self.items = scorer, criterion, resolve_criterion(criterion), items
        self.scored: dict[int, Scores] = {}
        self.picked: dict[int, list[int]] = {}  # position -> the samples of its grown group the step trains on

    def spread(self, position: int, group: list[Sequence]) -> bool:
        """Scores the group of the ``position``-th prompt (every sample, in sample order, with what its turns
        recorded); whether it has a spread."""
        item = self.items[position]
        one = Rollouts.from_sequences([item["prompt_ids"]], len(group), group)
        self.scored[position] = self.scorer(one, [item])
        return judge(self.criterion, self.name, self.scored[position])  # a CriterionError unless a bool

    def select(self, position: int, group: list[Sequence], m: int) -> list[int]:
        """The ``m`` samples of a grown group with the largest reward variance (PODS), remembered for the scores."""
        picked = max_variance_subset(self.scored[position].total[: len(group)], m)
        self.picked[position] = sorted(picked)
        return picked

    def level(self, position: int) -> float:
        """The reward a stalled group's samples share (rounded: the value rule's prior key)."""
        return round(float(self.scored[position].total.nanmean()), 3)

    def trained(self, positions: list[int], group_size: int) -> Scores:
        """The scores of the rows the step trains on, prompt-major: of each position, the samples :meth:`select`
        picked (a grown group with a spread), else its first ``group_size``."""
        first = list(range(group_size))
        return concat_scores([take_scores(self.scored[p], self.picked.get(p, first)) for p in positions])

    def found(
        self, grew: AdaptiveSummary, positions: list[int], group_size: int, accuracy: str | None
    ) -> AdaptiveSummary:
        """``grew`` with what the rewards of ``positions`` say (:class:`JudgedAdaptiveSummary`): of the prompts whose
        first ``group_size`` samples held no right answer, how many, and the right answers their later samples
        found; ``grew`` as it is without an ``accuracy`` reward."""
        if accuracy is None:
            return grew
        none_at_g = found = 0
        for p in positions:
            values = self.scored[p].parts[accuracy]
            if correct_answers(values[:group_size]).sum() == 0:
                none_at_g += 1
                found += int(correct_answers(values[group_size:]).sum())
        return JudgedAdaptiveSummary(**asdict(grew), prompts_without_right_at_g=none_at_g, right_answers_found=found)


class JudgedRollout:
    """A step's rollout under dynamic sampling, adaptive groups or both, and its scores (see the module docstring)."""

    def __init__(
        self,
        dynamic: DynamicSamplingConfig,
        adaptive: AdaptiveGroupsConfig,
        sampler: MicroGroupSampler,
        scorer: Scorer,
        group_size: int,
        accuracy: str | None = None,
        agent: AgentRollout | None = None,
    ) -> None:
        self.dynamic, self.adaptive, self.sampler, self.scorer = dynamic, adaptive, sampler, scorer
        self.g, self.accuracy, self.agent = group_size, accuracy, agent
        resolve_criterion(dynamic.criterion)  # the criterion also judges adaptive groups
        self.capped_in_a_row = 0
        self.unrescued: list[tuple[int, int]] = []  # (groups extended, extension samples) of steps in a row

    @classmethod
    def for_run(
        cls, s: ModuleSettings, sampler: MicroGroupSampler, scorer: Scorer, agent: AgentRollout | None = None
    ) -> JudgedRollout | None:
        """A run's judged rollout (``GRPOModule``'s settings ``s``; ``agent``: its tools): None unless dynamic
        sampling or adaptive groups are on (groups judged as they end)."""
        if not (s.dynamic_sampling.enabled or s.adaptive_groups.enabled):
            return None
        return cls(s.dynamic_sampling, s.adaptive_groups, sampler, scorer, s.group_size, s.rewards.accuracy, agent)

    def check(self, datamodule: Any) -> None:
        """Before the first step: the data module can stream prompts, and the cap and budget hold a batch."""
        if self.dynamic.enabled and not hasattr(datamodule, "prompt_stream"):
            raise ValueError(
                "dynamic_sampling.enabled needs a data module with prompt_stream() (infgrpo.data.PromptDataModule)"
                f" to draw prompts beyond the batch; got {type(datamodule).__name__}"
            )
        check_judged_batch(self.dynamic, self.adaptive, self.g, datamodule.hparams.batch_size)

    def __call__(
        self, batch: list[dict], seed: int, datamodule: Any, ranks: Ranks
    ) -> tuple[Rollouts, Scores, list[dict]]:
        """The rollout of this rank's share, its scores and its items (the prompts trained on, in order)."""
        items: list[dict] = [] if self.dynamic.enabled else list(batch)
        judge = GroupJudge(self.scorer, self.dynamic.criterion, items)
        grow = self.adaptive.spec(judge, self.g, len(batch)) if self.adaptive.enabled else None
        if self.dynamic.enabled:
            cap = self.dynamic.cap(len(batch))
            source, longest, turns, visions = self.draws(batch, datamodule, items)
            spec = DynamicSpec(len(batch), cap, judge.spread, scheme=self.dynamic.scheme, round_size=len(batch))
            rollouts = self.sampler.sample_dynamic(
                source, self.g, seed, spec, longest, prompt_offset=ranks.rank * cap, ranks=ranks, adaptive=grow,
                turns=turns, vision=visions,
            )  # fmt: skip
            self.warn_if_capped(rollouts.dynamic, cap)
            chosen = rollouts.drawn or []
        else:
            rollouts = sample_batch(self.sampler, self.agent, batch, self.g, seed, datamodule, ranks, adaptive=grow)
            chosen = list(range(len(batch)))
        if rollouts.adaptive is not None:
            rollouts.adaptive = judge.found(rollouts.adaptive, chosen, self.g, self.accuracy)
            self.warn_if_never_rescued(rollouts.adaptive)
        return rollouts, judge.trained(chosen, self.g), [items[i] for i in chosen]

    def draws(
        self, batch: list[dict], datamodule: Any, items: list[dict]
    ) -> tuple[Iterator[list[int]], int, Callable[[], Turns] | None, list[VisionInputs | None] | None]:
        """Dynamic sampling's prompt source (the batch, then the data module's stream; each item drawn joins
        ``items``), the longest prompt it may yield (the pool's width), the turns factory, and with images each drawn
        prompt's vision inputs by draw position (a list the source appends to: a row drawn from the stream is
        processed as it is drawn, as the data module's collate processes a batch's; None without images). With
        tools each drawn prompt is rendered (its environments reset; an image prompt through the processor, its vision
        inputs in the agent's list) as it is drawn; the batch's are rendered first, and the bound is the data module's
        longest prompt (rendered with the tool schemas: ``use_tools``) plus the longest environment observation of the
        batch (a longer one drawn later widens the pool: the sampler decodes again)."""
        stream = itertools.chain(batch, datamodule.prompt_stream())
        longest = datamodule.longest_prompt()
        images = getattr(datamodule, "processor", None) is not None
        if self.agent is None:
            visions: list[VisionInputs | None] = []

            def plain() -> Iterator[list[int]]:
                for n, item in enumerate(stream):
                    if images and n >= len(batch):  # the batch came collated; a row of the stream is processed now
                        item = datamodule.collate([item])[0]
                    items.append(item)
                    visions.append(item.get("vision"))
                    yield item["prompt_ids"]

            return plain(), longest, None, visions if images else None
        self.agent.start(prompt_format(datamodule))
        first = [self.agent.add(item, n) for n, item in enumerate(batch)]  # in draw order: the batch is drawn first
        extra = max(len(ids) - len(item["prompt_ids"]) for ids, item in zip(first, batch, strict=True))

        def rendered() -> Iterator[list[int]]:
            for n, item in enumerate(stream):
                items.append(item)
                yield first[n] if n < len(first) else self.agent.add(item, n)

        return rendered(), longest + max(extra, 0), self.agent.turns, self.agent.rendered_visions if images else None

    def warn_if_capped(self, found: DynamicSummary, cap: int) -> None:
        """Warns once the cap was hit :data:`WARN_AFTER` steps in a row (a reward that rarely varies)."""
        self.capped_in_a_row = self.capped_in_a_row + 1 if found.capped else 0
        if self.capped_in_a_row == WARN_AFTER:
            warnings.warn(
                f"[infgrpo] dynamic sampling hit dynamic_sampling.max_prompts={cap} {WARN_AFTER} steps in a row: "
                f"only {found.informative_rate:.0%} of the groups had a reward spread in the last step "
                "(a reward that never varies on these prompts, or a task too hard or too easy for the model); "
                "those steps trained on dropped groups, which carry no gradient",
                InfgrpoWarning,
                stacklevel=3,
            )

    def warn_if_never_rescued(self, grew: AdaptiveSummary) -> None:
        """Warns once when groups were extended :data:`WARN_AFTER` steps in a row and none found a spread: the
        extensions cost samples and gave nothing (a reward that never varies, or prompts far too hard)."""
        if grew.groups_rescued or not grew.groups_extended:
            self.unrescued = [] if grew.groups_rescued else self.unrescued
            return
        self.unrescued.append((grew.groups_extended, grew.extension_samples))
        if len(self.unrescued) == WARN_AFTER:
            groups, samples = (sum(x) for x in zip(*self.unrescued, strict=True))
            warnings.warn(
                f"[infgrpo] adaptive groups: {groups} groups were extended by {samples} samples over the last "
                f"{WARN_AFTER} steps and none found a reward spread (rescue rate 0 of {samples}): the reward may "
                "never vary on these prompts (check the reward function), or the task is far too hard for the model; "
                f"lower adaptive_groups.max_samples_per_prompt={self.adaptive.max_samples_per_prompt} (or turn "
                "adaptive groups off) to stop spending samples on them",
                InfgrpoWarning,
                stacklevel=3,
            )
