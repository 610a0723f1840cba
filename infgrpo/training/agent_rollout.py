"""AgentRollout: a run's multi-turn rollouts with tools and environments (``model.agent``), without Lightning.

    agent = AgentRollout(AgentConfig(tools=["my_tools:add"]), tokenizer, group_size=8)  # template checked, parser set
    rollouts, scores, items = agent(sampler, scorer, items, seed=0)        # decode with tools, then score
    scores = agent.heldout(eval_sampler, scorer, items)                      # one completion a held-out prompt

One rollout, as TRL 1.16's ``GRPOTrainer`` does it with ``tools=`` / ``environment_factory=``, minus its barrier:

1. the environments start from the batch's rows (an instance per sample, reset when first needed);
2. each prompt is rendered again with the tool schemas (and its environment's observation) through the agent's
   chat template: the data module's ids have no tools in them;
3. the sampler decodes with a fresh :class:`~infgrpo.agent.turns.ToolTurns` per engine run: a turn that calls tools
   leaves the slot pool until its results are in (:mod:`infgrpo.sampler.engine.turns`);
4. each completion's exchange (assistant turns and tool messages) is what the rewards get as ``completions``, with
   ``environments=`` and the environments' ``get_reward`` as more reward sources; the tool counters join the
   rollout's statistics (``tools/*`` metrics).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transformers import PreTrainedTokenizerBase

from infgrpo.agent import AgentConfig, Environments, ToolTurns, ToolWorkers
from infgrpo.agent.chat import check_tool_template, ensure_response_parser, load_template, render_prompt
from infgrpo.agent.tool_watch import ToolWatch
from infgrpo.agent.tools import load_tools, tool_box
from infgrpo.runtime.ranks import Ranks
from infgrpo.sampler import MicroGroupSampler, Rollouts
from infgrpo.sampler.schedule.sequence import Sequence
from infgrpo.scoring import Scorer, Scores


class AgentRollout:
    """The tools, environments and template of a run with ``model.agent`` (see the module docstring).

    Args:
        cfg: the ``model.agent`` settings (enabled).
        tokenizer: the policy's tokenizer: its template (or ``cfg.chat_template``) must render a tool exchange
            (a ConfigError otherwise); it gets a response parser for Qwen-style tool calls when it has none.
        group_size: completions a prompt in training rollouts (``model.group_size``).
        system_prompt, chat_template_kwargs: the data's (``data.system_prompt``, ``data.chat_template_kwargs``),
            which the prompts are rendered with; a rollout given the data module takes them from it.
    """

    def __init__(
        self,
        cfg: AgentConfig,
        tokenizer: PreTrainedTokenizerBase,
        group_size: int = 1,
        system_prompt: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.cfg, self.tokenizer, self.group_size = cfg, tokenizer, group_size
        self.template = load_template(cfg)
        check_tool_template(tokenizer, self.template, cfg.chat_template)
        ensure_response_parser(tokenizer, self.template, cfg.chat_template)
        tools, schemas = load_tools(cfg.tools)
        self.box = tool_box(tools, schemas)  # the standalone tools (without an environment, every sample's)
        self.envs = Environments.from_config(cfg)
        self.sources = {
            src.__name__: (src, 1.0) for src in (self.envs.reward_sources() if self.envs is not None else [])
        }
        self.workers = ToolWorkers(cfg.tool_workers, cfg.tool_timeout)  # the tool threads, shared by every rollout
        self.watch = ToolWatch(cfg.tool_timeout)  # tools that leave the run at reward 0: a warning once
        self.system_prompt, self.kwargs = system_prompt, dict(chat_template_kwargs or {})

    def use_data(self, datamodule: Any) -> None:
        """Renders prompts as ``datamodule`` does (its ``system_prompt`` and ``chat_template_kwargs``); None: as
        before."""
        hparams: Mapping[str, Any] | None = getattr(datamodule, "hparams", None)
        if hparams is not None:
            self.system_prompt = hparams.get("system_prompt")
            self.kwargs = dict(hparams.get("chat_template_kwargs") or {})

    # -- one rollout ----------------------------------------------------------------------------
    def prompt_ids(self, items: list[dict]) -> list[list[int]]:
        """Each item's prompt rendered with the tool schemas through the agent's template (with an environment: its
        observation appended to the last message; a string prompt is one user message)."""
        if self.envs is not None:  # reset(**row) gets every column, the prompt as the dataset gave it included (TRL)
            self.envs.start([{**it["meta"], "prompt": it.get("prompt", it["meta"].get("prompt"))} for it in items])
        out = []
        for i, item in enumerate(items):
            prompt = self.envs.prompt(i) if self.envs is not None else item.get("prompt", item["meta"].get("prompt"))
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            if self.system_prompt and messages[0].get("role") != "system":
                messages = [{"role": "system", "content": self.system_prompt}, *messages]
            schemas = self.envs.schemas(i) if self.envs is not None else self.box.schemas
            out.append(render_prompt(self.tokenizer, messages, schemas, self.template, self.kwargs))
        return out

    def __call__(
        self,
        sampler: MicroGroupSampler,
        scorer: Scorer,
        items: list[dict],
        seed: int,
        datamodule: Any = None,
        ranks: Ranks | None = None,
    ) -> tuple[Rollouts, Scores, list[dict]]:
        """``group_size`` multi-turn completions of each item (streams keyed by the global prompt index), their
        scores (the rewards get each completion's exchange, ``environments=`` and the environments' rewards) and
        ``items``; prompts rendered as ``datamodule`` renders them."""
        self.use_data(datamodule)
        offset = ranks.prompt_offset(len(items)) if ranks is not None else 0
        rollouts, exchanges = self.decode(sampler, items, self.group_size, seed, offset, ranks)
        return rollouts, self.score(scorer, rollouts, items, exchanges), items

    def heldout(self, sampler: MicroGroupSampler, scorer: Scorer, items: list[dict], datamodule: Any = None) -> Scores:
        """One multi-turn completion of each held-out item (the evaluation sampler's temperature), scored."""
        self.use_data(datamodule)
        rollouts, exchanges = self.decode(sampler, items, 1, 0)
        return self.score(scorer, rollouts, items, exchanges)

    def decode(
        self,
        sampler: MicroGroupSampler,
        items: list[dict],
        group_size: int,
        seed: int,
        prompt_offset: int = 0,
        ranks: Ranks | None = None,
    ) -> tuple[Rollouts, list[list[dict[str, Any]]]]:
        """The rollouts of ``items`` with tools (no scores) and each entry's exchange, the message list TRL's rewards
        get as its completion; the tool counters join ``rollouts.stats`` (``tool_calls``, ``tool_failures``)."""
        prompts = self.prompt_ids(items)
        made: list[ToolTurns] = []
        rollouts = sampler.sample(
            prompts, group_size, seed, prompt_offset=prompt_offset, ranks=ranks, turns=lambda: self._turns(made)
        )
        turns = made[-1]  # an attempt that ran out of memory left its own; the last one holds these rollouts' turns
        keys = sample_keys(rollouts)
        exchanges = [turns.ended(last_turn(rollouts, n, key), prompts[key[0]]) for n, key in enumerate(keys)]
        stats = turns.stats()
        rollouts.stats.update(tool_calls=stats["calls"], tool_failures=stats["failures"])
        self.watch(self.workers.take_tally(), turns.dropped, sampler.config.max_new_tokens)
        return rollouts, exchanges

    def _turns(self, made: list[ToolTurns]) -> ToolTurns:
        """A fresh :class:`ToolTurns` for one engine run (kept in ``made``: the last one holds the returned turns)."""
        boxes = self.envs.box if self.envs is not None else (lambda i, j: self.box)
        made.append(ToolTurns(self.tokenizer, boxes, self.template, self.kwargs, self.cfg.max_turns, self.workers))
        return made[-1]

    def score(
        self, scorer: Scorer, rollouts: Rollouts, items: list[dict], exchanges: list[list[dict[str, Any]]]
    ) -> Scores:
        """Scores ``rollouts`` as TRL's rewards see a tool run: the ``exchanges`` as completions, ``environments=``
        and the environments' ``get_reward``."""
        kwargs = {"environments": self.envs.instances(sample_keys(rollouts))} if self.envs is not None else None
        return scorer(rollouts, items, completions=exchanges, reward_kwargs=kwargs, sources=self.sources or None)

    def close(self) -> None:
        """Ends the tool threads."""
        self.workers.close()


def sample_keys(rollouts: Rollouts) -> list[tuple[int, int]]:
    """(prompt index, sample index) of each entry of ``rollouts``, prompt-major."""
    ids = rollouts.sample_ids
    if ids is None:
        ids = [n % rollouts.group_size for n in range(len(rollouts))]
    return list(zip(rollouts.prompt_index, ids, strict=True))


def last_turn(rollouts: Rollouts, n: int, key: tuple[int, int]) -> Sequence:
    """Entry ``n`` as a finished :class:`Sequence` whose current turn starts after its last tool-result token (what
    :meth:`ToolTurns.ended` parses when the engine never offered that turn: one cut by ``max_new_tokens``)."""
    ids = list(rollouts.completion_ids[n])
    mask = rollouts.tool_masks[n] if rollouts.tool_masks is not None else None
    start = 0 if mask is None or 0 not in mask else len(mask) - mask[::-1].index(0)
    return Sequence(key[0], key[1], token_ids=ids, tool_mask=mask, turn_start=start)
