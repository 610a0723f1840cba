"""AgentRollout: what a run with ``model.agent`` (tools, environments) adds to the one rollout path, without Lightning.

    agent = AgentRollout(AgentConfig(tools=["my_tools:add"]), tokenizer)  # the template checked, tools loaded once
    prompts, turns, visions = rollout_inputs(agent, items, datamodule)   # rendered with the tool schemas; a factory
    rollouts = sampler.sample(prompts, 8, seed=0, turns=turns, vision=visions)  # decode with tools
    scores = Scorer(tokenizer, rewards, "raise", 160, sources=agent.sources)(rollouts, items)

A rollout with tools is the plain one with three things added, as TRL 1.16's ``GRPOTrainer`` does it with ``tools=``
/ ``environment_factory=``, minus its barrier:

1. **render**: each prompt is rendered with the tool schemas (and its environment's observation) through the agent's
   chat template, by the data module's own rule (:class:`~infgrpo.data.conversation.PromptFormat`; the data module
   renders its items the same way, :meth:`~infgrpo.data.PromptDataModule.use_tools`, so its length checks see
   these prompts); an image prompt (a vision-language model's, :attr:`AgentRollout.processor` set) is rendered by the
   processor with ``tools=`` as TRL renders it, which gives its ids and its vision inputs (the images processed once
   a rollout; the sampler and the update take them);
2. **a Turns factory**: the sampler decodes with a fresh :class:`~infgrpo.agent.turns.ToolTurns` per engine run; a
   turn that calls tools leaves the slot pool until its results are in (:mod:`infgrpo.sampler.engine.turns`), and
   each finished sample's :class:`~infgrpo.agent.turns.Exchange` comes back on ``Rollouts.exchanges``, the tool
   counts on ``Rollouts.tools``;
3. **the score keywords**: the environments' ``get_reward`` are reward sources the run's
   :class:`~infgrpo.scoring.Scorer` is built with (:attr:`AgentRollout.sources`); the scorer hands the rewards each
   exchange as the completion and ``environments=``.

The plain rollout, the judged one (dynamic sampling, adaptive groups) and held-out scoring all take the same two
inputs (:func:`rollout_inputs`), so tools combine with every feed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import PreTrainedTokenizerBase

from infgrpo.agent import AgentConfig, Environments, ToolTurns, ToolWorkers
from infgrpo.agent.chat import prepare_template
from infgrpo.agent.tool_watch import ToolWatch
from infgrpo.agent.tools import load_factories, load_tools, tool_box
from infgrpo.data.conversation import PromptFormat
from infgrpo.data.images import holds_images, inject_images
from infgrpo.data.vision_prompts import encode_image_prompt
from infgrpo.runtime.ranks import Ranks
from infgrpo.sampler import MicroGroupSampler, Rollouts
from infgrpo.scoring import Source
from infgrpo.settings import ConfigError
from infgrpo.vision.inputs import VisionInputs, batch_visions


def agent_template(tokenizer: PreTrainedTokenizerBase, cfg: AgentConfig) -> str | None:
    """The chat template the agent renders with (None: the tokenizer's own), checked to render a tool exchange; the
    tokenizer gets the response parser of its call format when it has none (a ConfigError naming
    ``agent.chat_template`` and ``agent.call_format`` otherwise). The one place the agent asks
    :mod:`infgrpo.agent.chat` for its template."""
    return prepare_template(tokenizer, cfg)


def prompt_format(datamodule: Any) -> PromptFormat:
    """How ``datamodule`` renders prompts (its ``prompt_format``); the defaults without one."""
    fmt = getattr(datamodule, "prompt_format", None)
    return fmt if isinstance(fmt, PromptFormat) else PromptFormat()


class AgentRollout:
    """The tools, environments and template of a run with ``model.agent`` (see the module docstring).

    Args:
        cfg: the ``model.agent`` settings (enabled).
        tokenizer: the policy's tokenizer: its template (or ``cfg.chat_template``) must render a tool exchange
            (a ConfigError otherwise); it gets the response parser of its call format when it has none.
        group_size: completions a prompt in training rollouts (``model.group_size``).
    """

    def __init__(self, cfg: AgentConfig, tokenizer: PreTrainedTokenizerBase, group_size: int = 1) -> None:
        self.cfg, self.tokenizer, self.group_size = cfg, tokenizer, group_size
        self.template = agent_template(tokenizer, cfg)
        tools, schemas = load_tools(cfg.tools)  # once a run: the environments' boxes reuse them
        self.box = tool_box(tools, schemas)  # the standalone tools (without an environment, every sample's)
        self.envs = Environments(load_factories(cfg.environment), (tools, schemas)) if cfg.environment else None
        self.sources: dict[str, Source] = {
            src.__name__: (src, 1.0) for src in (self.envs.reward_sources() if self.envs is not None else [])
        }
        """The environments' rewards (``get_reward``, named after the class, weight 1): the run's Scorer takes them."""
        self._workers: ToolWorkers | None = None
        self.format = PromptFormat()
        """How the current rollout's prompts were rendered (its chat template options render the tool results)."""
        self.watch = ToolWatch(cfg.tool_timeout)
        """Tools that leave the run at reward 0 without a word: a warning once (:meth:`watch_rollout`)."""
        self._runs = 0
        self.sample_prompts: list[list[list[int]]] | None = None
        """The last :meth:`prompt_ids`' prompt ids of each sample of each row when some row's samples got different
        observations (each distinct one rendered once a row: samples with equal observations share one list); None
        when every sample of a row decodes its row's prompt. The sampler's ``sample_prompts``."""
        self.processor: Any = None
        """The model's processor when the data's prompts hold images (``StepRollout.use_data`` sets the data module's):
        an item with ``images`` is rendered by it (ids and vision inputs); None renders every prompt as text."""
        self.rendered_visions: list[VisionInputs | None] = []
        """This rollout's vision inputs by render position (each prompt's as :meth:`render` rendered it, None for a
        prompt without images): a list that grows as prompts are drawn (:meth:`add`); :attr:`visions` reads it."""
        self.rendered_images: list[list[Any] | None] = []
        """This rollout's images by render position (an image prompt's, else None): what :meth:`with_images` injects
        into a prompt with an environment's observation."""

    @property
    def workers(self) -> ToolWorkers:
        """The tool threads, shared by every rollout of the run (made again after :meth:`close`)."""
        if self._workers is None:
            self._workers = ToolWorkers(self.cfg.tool_workers, self.cfg.tool_timeout)
        return self._workers

    def schemas(self, row: dict) -> list[dict]:
        """The tool schemas the prompt of ``row`` is rendered with: the standalone tools, then its environment's
        methods."""
        return self.envs.row_schemas(row) if self.envs is not None else self.box.schemas

    @property
    def visions(self) -> list[VisionInputs | None] | None:
        """This rollout's vision inputs by prompt (render order), the very list that grows as prompts are drawn, or
        None when no prompt rendered so far holds images: the sampler's ``vision``."""
        return self.rendered_visions if any(v is not None for v in self.rendered_visions) else None

    def prompt_ids(
        self, items: list[dict], fmt: PromptFormat | None = None, group_size: int | None = None
    ) -> list[list[int]]:
        """Each item's prompt rendered with the tool schemas through the agent's template by ``fmt`` (the data
        module's rule; default: :class:`PromptFormat`'s), with an environment: its observation appended to the last
        message; an image prompt through the processor (:attr:`visions`). Starts a new rollout of ``items`` x
        ``group_size`` samples (default: the run's): every sample's environment is dealt and reset first, in TRL's
        batch order."""
        self.start(fmt)
        if self.envs is None:
            return [self.render(i, item) for i, item in enumerate(items)]
        g = self.group_size if group_size is None else group_size
        self.envs.start([self.row(item) for item in items], g)
        per_sample = [self.render_samples(i, item) for i, item in enumerate(items)]
        if any(len({id(p) for p in row}) > 1 for row in per_sample):
            if self.visions is not None:
                raise ConfigError(
                    "model.agent.environment: a batch holds image prompts and a prompt whose samples got different "
                    "observations from reset(); with image prompts every row's samples must share its observation "
                    "(one drawn from the row or its seed)"
                )
            self.sample_prompts = per_sample
        return [row[0] for row in per_sample]  # sample 0's: the row's prompt (rewards, the table, the predictor)

    def render_samples(self, i: int, item: dict) -> list[list[int]]:
        """Each sample's prompt ids of row ``i`` (``item``; its environments reset): each distinct observation
        rendered once, one list object for the samples that got it. A ConfigError for an image prompt whose samples
        got different observations (one prompt's images a group, prefilled once: its samples share the prompt)."""
        observations = self.one_image_prompt(i, item)
        self.rendered_images.append(item.get("images") if self.is_image(item) else None)
        rendered: dict[str | None, list[int]] = {}
        for j, observation in enumerate(observations):
            if observation not in rendered:
                prompt = self.with_images(i, self.envs.prompt(i, j))
                rendered[observation], vision = self.encode(item, prompt, self.envs.schemas(i))
                if j == 0:
                    self.rendered_visions.append(vision)  # the row's (an image prompt has one observation)
        return [rendered[observation] for observation in observations]

    def one_image_prompt(self, i: int, item: dict) -> list[str | None]:
        """The observations of row ``i``'s samples (``item``; environments reset); a ConfigError when ``item`` is an
        image prompt and they differ: its samples share one prompt, prefilled once with its images."""
        observations = self.envs.observations(i)
        if len(set(observations)) > 1 and self.is_image(item):
            raise ConfigError(
                f"model.agent.environment: the environments of prompt {i} (an image prompt) returned "
                f"{len(set(observations))} different observations from reset(); the samples of an image prompt share "
                "its prompt (prefilled once with its images): return the same observation for a row's samples, e.g. "
                "one drawn from the row or its seed"
            )
        return observations

    def is_image(self, item: dict) -> bool:
        """Whether ``item`` is an image prompt this agent renders through the processor."""
        return self.processor is not None and bool(item.get("images"))

    def encode(self, item: dict, prompt: Any, schemas: list[dict]) -> tuple[list[int], VisionInputs | None]:
        """The ids of ``prompt`` (``item``'s, maybe with an observation) with the tool ``schemas``, and its vision
        inputs: through the processor for an image prompt, else through the tokenizer (None); either way by the data
        module's rule (:attr:`format`) and the agent's template."""
        if not self.is_image(item):
            if item.get("images"):
                raise ConfigError(
                    "an image prompt reached model.agent's rollout without the model's processor: pass the data "
                    "module (rollout_inputs(agent, items, datamodule)) or set AgentRollout.processor"
                )
            return self.format.encode(self.tokenizer, prompt, schemas, self.template), None
        fmt = self.format
        template = self.template or self.tokenizer.chat_template  # the one the agent checked (and renders results by)
        return encode_image_prompt(
            self.processor, prompt, fmt.system_prompt, fmt.chat_template_kwargs, schemas, template
        )

    @staticmethod
    def row(item: dict) -> dict:
        """What ``reset(**row)`` gets of an item: every column, the prompt as the dataset gave it included (TRL; an
        image prompt's before its images are injected)."""
        prompt = item.get("conversation", item.get("prompt", item["meta"].get("prompt")))
        return {**item["meta"], "prompt": prompt}

    def with_images(self, i: int, prompt: Any) -> Any:
        """Prompt ``i`` of this rollout with an environment's observation (``prompt``), its images injected as TRL
        injects them after the observation (the prompt as rendered, and as the rewards get it)."""
        images = self.rendered_images[i] if i < len(self.rendered_images) else None
        if not images or holds_images(prompt):  # an item without its conversation: the rewrite already holds them
            return prompt
        return inject_images(prompt, images)

    def render(self, i: int, item: dict) -> list[int]:
        """Prompt ``i`` of this rollout (``item``) rendered with its tools (and its environment's observation)."""
        self.rendered_images.append(item.get("images") if self.is_image(item) else None)
        if self.envs is None:
            ids, vision = self.encode(item, item.get("prompt", item["meta"].get("prompt")), self.box.schemas)
        else:
            ids, vision = self.encode(item, self.with_images(i, self.envs.prompt(i)), self.envs.schemas(i))
        self.rendered_visions.append(vision)  # by render position: the sampler's vision
        return ids

    def start(self, fmt: PromptFormat | None = None) -> None:
        """A new rollout, of no prompt yet: its environments afresh, and ``fmt``, how its prompts are rendered (its
        chat template options render the tool results too)."""
        self.format = fmt if fmt is not None else PromptFormat()
        self.sample_prompts = None
        self.rendered_visions = []
        self.rendered_images = []
        self._runs = 0  # engine runs of this rollout: a second one is an out-of-memory retry
        if self.envs is not None:
            self.envs.start([])

    def add(self, item: dict, index: int) -> list[int]:
        """Prompt ``index`` of this rollout, drawn now (dynamic sampling), rendered as :meth:`prompt_ids` renders
        them; with an environment its row's ``group_size`` instances are dealt and reset first."""
        if self.envs is not None:
            self.envs.add(self.row(item), self.group_size)  # its samples must agree (shared): one prompt a row
        return self.render(index, item)

    def turns(self) -> ToolTurns:
        """A fresh :class:`ToolTurns` for one engine run (the sampler's ``turns`` factory). A second run of the same
        rollout is an out-of-memory retry: every environment is reset again first, in the order dealt, so the retry
        replays the first attempt (:meth:`~infgrpo.agent.environments.Environments.replay`)."""
        envs = self.envs
        self._runs += 1
        if envs is not None and self._runs > 1:
            envs.replay()
        boxes = envs.box if envs is not None else (lambda i, j: self.box)
        return ToolTurns(
            self.tokenizer, boxes, self.template, self.format.chat_template_kwargs, self.cfg.max_turns, self.workers,
            envs.instance if envs is not None else None,
            (lambda i, j: self.with_images(i, envs.prompt(i, j))) if envs is not None else None,
        )  # fmt: skip

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
        get as its completion (``Rollouts.exchanges``' messages): benchmarks and tests."""
        prompts, turns, visions = rollout_inputs(self, items, group_size=group_size)
        rollouts = sampler.sample(
            prompts, group_size, seed, prompt_offset=prompt_offset, ranks=ranks, turns=turns,
            sample_prompts=self.sample_prompts, vision=visions,
        )  # fmt: skip
        self.watch_rollout(rollouts, sampler.config.max_new_tokens)
        return rollouts, [x.messages for x in rollouts.exchanges or []]

    def watch_rollout(self, rollouts: Rollouts, max_new_tokens: int) -> None:
        """After a rollout: warns once of each tool that leaves the run at reward 0 without a word (:class:`ToolWatch`:
        every call failing, ``None`` returned, ``SystemExit`` caught, timeouts, results dropped as too long), from the
        calls since the last rollout."""
        dropped = rollouts.tools.dropped if rollouts.tools is not None else 0
        self.watch(self.workers.take_tally(), dropped, max_new_tokens)

    def close(self) -> None:
        """Ends the tool threads (``GRPOModule`` calls it as fit ends; a later rollout makes new ones)."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None


def rollout_inputs(
    agent: AgentRollout | None, items: list[dict], datamodule: Any = None, group_size: int | None = None
) -> tuple[list[list[int]], Callable[[], ToolTurns] | None, list[VisionInputs | None] | None]:
    """(the prompt ids, the ``turns`` factory, the prompts' vision inputs) a rollout of ``items`` x ``group_size``
    samples (default: the run's) decodes with: the items' own ids, no turns and their ``vision`` (the data module's
    batches carry it), or with ``agent`` the prompts rendered with its tools as ``datamodule`` renders prompts (every
    sample's environment dealt and reset first), its turns and the vision inputs of that rendering. The vision
    inputs are None when no prompt holds images."""
    if agent is None:
        return [item["prompt_ids"] for item in items], None, batch_visions(items)
    agent.processor = agent.processor or getattr(datamodule, "processor", None)  # image prompts: rendered by it
    prompts = agent.prompt_ids(items, prompt_format(datamodule), group_size)
    return prompts, agent.turns, agent.visions


def sample_prompts(agent: AgentRollout | None) -> list[list[list[int]]] | None:
    """The sampler's ``sample_prompts`` after :func:`rollout_inputs`: each sample's prompt ids when some row's samples
    got different observations (:attr:`AgentRollout.sample_prompts`), else None."""
    return agent.sample_prompts if agent is not None else None
