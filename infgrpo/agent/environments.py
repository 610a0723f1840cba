"""Environments: one instance per sample, reset from its row, whose methods are the sample's tools (TRL 1.16's
``environment_factory``).

    envs = Environments.from_config(cfg)        # probes one instance per factory: reset and methods checked
    envs.start(rows, group_size=8)              # a new rollout: rows[i] is prompt i's; 8 instances a row, reset
    i = envs.add(row, group_size=8)             # one more row (dynamic sampling draws them one at a time)
    messages = envs.prompt(0, 3)                # row 0's prompt, sample 3's observation appended
    envs.observations(0)                        # each sample's observation of row 0 (they may differ)
    box = envs.box(0, 3)                        # sample 3 of prompt 0: the standalone tools + its instance's methods
    envs.instances([(0, 0), (0, 1)])            # aligned with the completions: the rewards' environments=
    envs.reward_sources()                       # one reward per class that defines get_reward (weight 1)

As in TRL, instances are made by calling the factory with no arguments and reused from rollout to rollout
("construct once, reset often"): each name keeps a pool. A rollout deals its instances in TRL 1.16's batch order
before anything is generated (``GRPOTrainer._generate_and_score_completions``): every sample's instance is handed
out first, row by row and sample by sample (made when the pool runs short), then each is reset in that same order,
so an environment that draws from a shared or per-instance random state sees what it sees under TRL. Dynamic
sampling deals a row's instances when it draws the row; an adaptive group's extra samples get theirs when they
first need one. ``reset(**row)`` gets every column of the row, the ``environment`` column dropped when a mapping
picks the factory (TRL's rule); a reset that raises is one line naming the environment, ``reset`` and the row. A
string it returns is appended to the prompt's last message with no separator. As in TRL, which renders a prompt per
completion, the samples of a row may get different observations (a game dealt at random): the rollout then renders
each distinct one once (:attr:`~infgrpo.training.agent_rollout.AgentRollout.sample_prompts`). A row drawn by dynamic
sampling, or an adaptive group's extra sample, decodes from its row's one prompt: there a sample whose observation
differs from the row's first is one line naming the row.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from infgrpo.agent.tools import (
    Factory,
    ToolBox,
    bound_methods,
    check_environment,
    defines,
    load_factories,
    load_tools,
    tool_box,
    tool_schema,
)

if TYPE_CHECKING:
    from infgrpo.agent.config import AgentConfig

EMPTY_PROMPT: list[dict[str, str]] = [{"role": "user", "content": ""}]
"""The prompt of a row without one (TRL's default with an environment: reset supplies the task)."""


class AgentError(ValueError):
    """A user's environment or tool failed while a rollout ran (a reset that raised, a turn whose results could not
    be rendered): one line naming it, as :class:`~infgrpo.rewards.RewardError` names a reward."""


def with_observation(prompt: str | list[dict[str, Any]], observation: str | None) -> str | list[dict[str, Any]]:
    """``prompt`` with ``observation`` appended to its last message's content (to a string prompt itself), no
    separator; a content of blocks (an image prompt: TRL's rewrite) gets it as a text block. The last message is
    rebuilt, never changed in place (TRL's rule)."""
    if observation is None:
        return prompt
    if isinstance(prompt, str):
        return prompt + observation
    content = prompt[-1]["content"]
    added = [{"type": "text", "text": observation}] if isinstance(content, list) else observation
    return [*prompt[:-1], {**prompt[-1], "content": content + added}]


def environment_reward(cls: type) -> Callable[..., list[Any]]:
    """The reward of ``cls``'s ``get_reward`` (TRL's rule): ``fn(environments, **kwargs)`` gives
    ``get_reward()`` of each instance of exactly ``cls`` and None (no score) for any other; async when
    ``get_reward`` is. Named after the class, as TRL logs it."""
    if inspect.iscoroutinefunction(cls.get_reward):

        async def reward(environments: Sequence[Any], **kwargs: Any) -> list[Any]:
            return [await env.get_reward() if type(env) is cls else None for env in environments]

    else:

        def reward(environments: Sequence[Any], **kwargs: Any) -> list[Any]:
            return [env.get_reward() if type(env) is cls else None for env in environments]

    reward.__name__ = reward.__qualname__ = cls.__name__
    reward.__doc__ = f"{cls.__name__}.get_reward() of each completion's environment (None for other environments)."
    return reward


class Environments:
    """The environment instances of a rollout's samples, keyed by (prompt index, sample index); see the module
    docstring. ``factories`` maps names to factories (``{None: factory}`` for one environment, used by every row);
    ``tools`` are the standalone tools and their schemas, listed before each environment's methods."""

    def __init__(
        self,
        factories: Mapping[str | None, Factory],
        tools: tuple[list[Callable[..., Any]], list[dict[str, Any]]] = ([], []),
    ) -> None:
        self.factories = dict(factories)
        self.multi = None not in self.factories
        """Whether rows pick their environment by an ``environment`` column."""
        self.tools, tool_schemas = tools
        self._pool: dict[str | None, list[Any]] = {}
        self._schemas: dict[str | None, list[dict[str, Any]]] = {}
        for name, factory in self.factories.items():  # one probe each: its methods' schemas, the pool's first
            probe = factory()
            check_environment(type(probe), f"environment {name!r}" if self.multi else "environment")
            methods = bound_methods(probe)
            self._pool[name] = [probe]
            self._schemas[name] = [
                *tool_schemas,
                *(tool_schema(m, f"{type(probe).__name__}.{m.__name__}") for m in methods),
            ]
        self.start([])

    @classmethod
    def from_config(cls, cfg: AgentConfig) -> Environments | None:
        """The environments of ``cfg`` (``agent.environment`` with ``agent.tools``); None without an environment."""
        if not cfg.environment:
            return None
        return cls(load_factories(cfg.environment), load_tools(cfg.tools))

    def start(self, rows: Sequence[Mapping[str, Any]], group_size: int = 0) -> None:
        """A new rollout of ``rows`` (row i is prompt i's): its instances are handed out afresh, ``group_size`` a
        row dealt and reset in TRL's batch order (see the module docstring); a ValueError naming the row whose
        ``environment`` is none of the names (with a mapping of factories)."""
        self.rows: list[Mapping[str, Any]] = []
        self._names: list[str | None] = []
        self._given: dict[str | None, int] = dict.fromkeys(self.factories, 0)  # instances handed out, by name
        self._instances: dict[tuple[int, int], Any] = {}
        self._boxes: dict[tuple[int, int], ToolBox] = {}
        self._observations: dict[tuple[int, int], str | None] = {}  # (row, sample) -> its observation
        added = [self.add(row) for row in rows]
        self.deal([(i, j) for i in added for j in range(group_size)])

    def add(self, row: Mapping[str, Any], group_size: int = 0) -> int:
        """One more row of this rollout (a prompt drawn), its ``group_size`` instances dealt and reset; returns its
        index. A ValueError naming the row when its ``environment`` is none of the names (with a mapping)."""
        i, name = len(self.rows), row.get("environment") if self.multi else None
        if name not in self.factories:
            raise ValueError(
                f"row {i} has environment={name!r}, which is none of agent.environment's names: "
                f"{', '.join(map(str, self.factories))}"
            )
        self.rows.append(row)
        self._names.append(name)
        self.deal([(i, j) for j in range(group_size)], shared=True)
        return i

    def deal(self, keys: Sequence[tuple[int, int]], shared: bool = False) -> None:
        """Hands out an instance to each sample of ``keys`` (prompt index, sample index), in order, then resets each
        in that order (TRL's batch order); samples that have one keep it. ``shared``: these samples decode from their
        row's one prompt, so each observation must equal the row's first (a ValueError naming the row otherwise)."""
        new = [key for key in keys if key not in self._instances]
        for i, j in new:
            name = self._names[i]
            pool, given = self._pool[name], self._given[name]
            if given == len(pool):
                pool.append(self.factories[name]())
            self._given[name] = given + 1
            self._instances[i, j] = pool[given]
        for i, j in new:
            self._reset(i, j, shared)

    def _reset(self, i: int, j: int, shared: bool = False) -> None:
        """Resets sample ``j``'s instance with row ``i`` and records its observation; an :class:`AgentError` naming
        the environment, ``reset`` and the row when it raises."""
        env, row = self._instances[i, j], self.rows[i]
        try:
            observation = env.reset(**({k: v for k, v in row.items() if k != "environment"} if self.multi else row))
        except Exception as err:  # noqa: BLE001 - the user's environment: one line naming it and the row
            name = f"environment {self._names[i]!r} " if self.multi else "the environment "
            columns = ", ".join(sorted(map(str, row)))
            raise AgentError(
                f"{name}({type(env).__name__}): reset(**row) raised {type(err).__name__}: {err} for row {i} of the "
                f"rollout (columns: {columns}); reset gets every column of its row by name"
            ) from err
        self._observe(i, j, type(env).__name__, observation, shared)

    def replay(self) -> None:
        """Resets every instance dealt so far again, in the order they were dealt, with its row: an out-of-memory retry
        of the rollout starts from the state the first attempt started from (its tools may have changed the
        instances). An :class:`AgentError` naming the sample when an observation differs from the first attempt's
        (the prompts were rendered from those): ``reset`` must then be a function of its row (seed it with a row
        column, as the resume rule asks)."""
        for i, j in list(self._instances):
            seen = self._observations.pop((i, j))
            self._reset(i, j)
            if self._observations[i, j] != seen:
                raise AgentError(
                    f"row {i}: an out-of-memory retry of the rollout reset sample {j}'s environment again and got "
                    f"{self._observations[i, j]!r}, not {seen!r}: a retry replays the rollout only when reset(**row) "
                    "gives the same observation again (derive it from the row, e.g. its seed column)"
                )

    def schemas(self, i: int) -> list[dict[str, Any]]:
        """The tool schemas prompt ``i`` is rendered with: the standalone tools, then its environment's methods."""
        return self._schemas[self._names[i]]

    def row_schemas(self, row: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The tool schemas a prompt of ``row`` is rendered with (its ``environment`` column picks them with a
        mapping; a ValueError naming the value when it names none)."""
        name = row.get("environment") if self.multi else None
        if name not in self._schemas:
            raise ValueError(
                f"a row has environment={name!r}, which is none of agent.environment's names: "
                f"{', '.join(map(str, self.factories))}"
            )
        return self._schemas[name]

    def instance(self, i: int, j: int) -> Any:
        """The environment of sample ``j`` of prompt ``i``: dealt when the rollout started (or its row was drawn),
        else taken from its pool (made when the pool runs short) and reset with row ``i`` now (an adaptive group's
        extra sample)."""
        if (i, j) not in self._instances:
            self.deal([(i, j)], shared=True)  # an adaptive group's extra sample: it decodes its row's prompt
        return self._instances[i, j]

    def _observe(self, i: int, j: int, cls: str, observation: Any, shared: bool) -> None:
        """Records sample ``j``'s observation of row ``i``; a ValueError naming the row when it is not None or a
        string, or when ``shared`` and it differs from the row's first sample's."""
        if observation is not None and not isinstance(observation, str):
            raise ValueError(
                f"row {i}: {cls}.reset(**row) returned a {type(observation).__name__}; it must return None or a "
                "string (appended to the prompt's last message)"
            )
        self._observations[i, j] = observation
        first = next(k for (r, k) in self._observations if r == i)
        if shared and observation != self._observations[i, first]:
            raise ValueError(
                f"row {i}: {cls}.reset(**row) returned {observation!r} for sample {j} but "
                f"{self._observations[i, first]!r} for sample {first}; dynamic sampling and adaptive groups decode a "
                "row's samples from one prompt, so there reset must give each the same observation (derive it from "
                "the row, e.g. seed it with a row column), or turn them off"
            )

    def observations(self, i: int) -> list[str | None]:
        """The observation of each sample of row ``i`` dealt so far, in sample order (they may differ)."""
        return [obs for (r, _), obs in sorted(self._observations.items()) if r == i]

    def prompt(self, i: int, j: int = 0) -> str | list[dict[str, Any]]:
        """Row ``i``'s prompt (TRL's default user message without a ``prompt`` column) with sample ``j``'s
        observation."""
        self.instance(i, j)
        return with_observation(self.rows[i].get("prompt", EMPTY_PROMPT), self._observations[i, j])

    def box(self, i: int, j: int) -> ToolBox:
        """The tools sample ``j`` of prompt ``i`` calls: the standalone tools and its instance's methods."""
        key = (i, j)
        if key not in self._boxes:
            self._boxes[key] = tool_box([*self.tools, *bound_methods(self.instance(i, j))], self.schemas(i))
        return self._boxes[key]

    def instances(self, keys: Iterable[tuple[int, int]]) -> list[Any]:
        """The instances of the samples ``keys`` ((prompt index, sample index) of each completion, in order): the
        rewards' ``environments=``."""
        return [self.instance(i, j) for i, j in keys]

    def reward_sources(self) -> list[Callable[..., list[Any]]]:
        """One reward per environment class that defines ``get_reward``, once per class (a mapping may name one
        class twice), in the mapping's order: weight 1, named after the class (TRL's rule)."""
        classes = dict.fromkeys(type(pool[0]) for pool in self._pool.values())
        return [environment_reward(cls) for cls in classes if defines(cls, "get_reward")]
