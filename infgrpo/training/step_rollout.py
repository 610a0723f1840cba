"""StepRollout: which path decodes a step's batch and the held-out prompts, and the scores, without Lightning.

    rollout = StepRollout(sampler, scorer, agent=agent, judged=JudgedRollout.for_run(s, sampler, scorer, agent))
    rollouts, scores, items = rollout(batch, s, trainer, ranks)      # GRPOModule's settings s; a step's rollout
    scores = rollout.heldout(eval_sampler, items, datamodule)        # one completion per held-out prompt

A step decodes one of two ways: the judged rollout (dynamic sampling, adaptive groups: its groups scored as they
end, :mod:`infgrpo.training.judged_rollout`) or the plain one, :func:`sample_batch` (the batch's prompts, rendered
with the tool schemas under ``model.agent``, :mod:`infgrpo.training.agent_rollout`). Either way the step's scores
come from the one :class:`~infgrpo.scoring.Scorer`: the judge's, or the scorer's over the rollout's completions.
Held-out prompts decode on the evaluation sampler by the same inputs (:func:`~infgrpo.evaluation.score_heldout`).
Non-finite logits stop the run, naming the settings that likely caused them (:mod:`infgrpo.training.divergence`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from infgrpo.evaluation import score_heldout
from infgrpo.runtime.ranks import Ranks
from infgrpo.runtime.seeds import derive_seed
from infgrpo.sampler import MicroGroupSampler, Rollouts
from infgrpo.sampler.engine.finite import NonFiniteLogitsError
from infgrpo.scoring import Scorer, Scores
from infgrpo.training.agent_rollout import AgentRollout, rollout_inputs, sample_prompts
from infgrpo.training.divergence import rollout_divergence
from infgrpo.training.preflight.data_check import check_environment_items

if TYPE_CHECKING:
    from infgrpo.training.hparams import ModuleSettings

Judged = Callable[[list[dict], int, Any, Ranks], tuple[Rollouts, Scores, list[dict]]]
"""A judged rollout (:class:`~infgrpo.training.judged_rollout.JudgedRollout`): (batch, seed, data module, ranks) ->
(rollouts, the judge's scores, the items trained on)."""


def sample_batch(
    sampler: MicroGroupSampler,
    agent: AgentRollout | None,
    batch: list[dict],
    group_size: int,
    seed: int,
    datamodule: Any,
    ranks: Ranks,
    adaptive: Any = None,
) -> Rollouts:
    """``group_size`` samples of each item of ``batch`` (this rank's share: streams keyed by the global prompt), with
    the agent's tools when ``agent`` is set, image prompts encoded once per prompt, and ``adaptive`` groups."""
    (prompts, turns, visions), offset = rollout_inputs(agent, batch, datamodule), ranks.prompt_offset(len(batch))
    return sampler.sample(
        prompts, group_size, seed, prompt_offset=offset, ranks=ranks, adaptive=adaptive, turns=turns,
        vision=visions,  # image prompts: encoded once per prompt, here and in the update
        sample_prompts=sample_prompts(agent),  # environments whose samples differ
    )  # fmt: skip


class StepRollout:
    """The rollout of a run's steps and of its held-out prompts (see the module docstring).

    Args:
        sampler: the training rollouts' sampler.
        scorer: the run's scorer (with the agent's reward sources).
        agent: the run's tools and environments (``model.agent``), or None.
        judged: the judged rollout (dynamic sampling, adaptive groups), or None.
    """

    def __init__(
        self,
        sampler: MicroGroupSampler,
        scorer: Scorer,
        agent: AgentRollout | None = None,
        judged: Judged | None = None,
    ) -> None:
        self.sampler, self.scorer, self.agent, self.judged = sampler, scorer, agent, judged

    def __call__(
        self,
        batch: list[dict],
        settings: ModuleSettings,
        trainer: Any,
        ranks: Ranks,
        phases: Iterable[contextlib.AbstractContextManager] = (),
    ) -> tuple[Rollouts, Scores, list[dict]]:
        """A step's rollout of ``batch`` under ``GRPOModule``'s ``settings`` (its seed and ``group_size``), decoded
        inside ``phases`` (the rollout's memory phase, the full weights): :meth:`decode`, then :meth:`scored`.
        Non-finite logits are a :class:`~infgrpo.training.divergence.DivergenceError` naming the likely settings."""
        seed = derive_seed(settings.seed, self.sampler.calls)  # the same on every rank
        try:
            with contextlib.ExitStack() as stack:
                for phase in phases:
                    stack.enter_context(phase)
                rollouts, scores, items = self.decode(batch, settings.group_size, seed, trainer.datamodule, ranks)
            return self.scored(rollouts, scores, items)
        except NonFiniteLogitsError as err:  # the sampler's, named here with the settings that likely caused it
            raise rollout_divergence(err, settings, trainer) from err

    def use_data(self, datamodule: Any) -> None:
        """As fit sets up, with tools: every row routes to a known environment (one line naming the row otherwise)
        and the data module renders its prompts with the tool schemas, as the rollout does, so its length checks and
        the context check at fit start measure those (:meth:`~infgrpo.data.PromptDataModule.use_tools`); with image
        prompts the agent renders them through the data module's processor."""
        if self.agent is not None and hasattr(datamodule, "use_tools"):
            check_environment_items(self.agent.cfg, datamodule)  # a row's schemas are its environment's
            datamodule.use_tools(self.agent.schemas, self.agent.template)
            self.agent.processor = getattr(datamodule, "processor", None)  # image prompts: rendered by it

    def decode(
        self, batch: list[dict], group_size: int, seed: int, datamodule: Any, ranks: Ranks
    ) -> tuple[Rollouts, Scores | None, list[dict]]:
        """The rollout of ``batch`` (``group_size`` samples an item), the judge's scores (None on the plain path:
        :meth:`scored` scores it) and the items trained on (under dynamic sampling the groups kept, drawn from the
        batch and the data module's prompt stream; else ``batch``)."""
        if self.judged is not None:
            return self.judged(batch, seed, datamodule, ranks)
        return sample_batch(self.sampler, self.agent, batch, group_size, seed, datamodule, ranks), None, batch

    def scored(
        self, rollouts: Rollouts, scores: Scores | None, items: list[dict]
    ) -> tuple[Rollouts, Scores, list[dict]]:
        """After :meth:`decode`: warns once of each tool that leaves the run at reward 0, and scores the rollout of
        ``items`` unless the judge did."""
        if self.agent is not None:
            self.agent.watch_rollout(rollouts, self.sampler.config.max_new_tokens)
        return rollouts, scores if scores is not None else self.scorer(rollouts, items), items

    def heldout(self, eval_sampler: MicroGroupSampler, items: list[dict], datamodule: Any) -> Scores:
        """The scores of one completion per held-out item, decoded on ``eval_sampler`` (with the tools)."""
        prompts, turns, visions = rollout_inputs(self.agent, items, datamodule, group_size=1)
        return score_heldout(eval_sampler, self.scorer, items, len(items), prompts, turns, visions)[0]

    def close(self) -> None:
        """Ends the tool threads (as fit or a validation ends); a later rollout makes new ones."""
        if self.agent is not None:
            self.agent.close()
