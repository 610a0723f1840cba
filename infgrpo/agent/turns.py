"""ToolTurns: the engine's ``Turns`` (``infgrpo.sampler.engine.turns``) for tools, one per rollout.

    turns = ToolTurns(tokenizer, boxes, template, kwargs, max_turns=4, workers=ToolWorkers(8))
    future = turns.turn_ended(seq, prompt_ids)   # a turn ended on a stop token: its tool results' ids, or None
    turns.rolled_back(seq)                       # the engine dropped those results (too long): forget them
    record = turns.ended(seq, prompt_ids)        # the sample is done: an Exchange (its last turn parsed if need be)
    record.messages                              # [assistant, tool, ..., assistant]: what the rewards read
    turns.calls, turns.failures, turns.timeouts, turns.dropped  # what this rollout ran (the engine's ToolSummary)

At a turn's end (TRL 1.16's ``_tool_call_loop``, per sample instead of per batch): the turn
``seq.token_ids[seq.turn_start:]`` is parsed after the prompt and the ids before it, and the assistant message joins
the sample's exchange. When it calls tools and fewer than ``max_turns`` rounds ran (``seq.turns``), the calls and the
rendering of their results go to a worker thread, and the engine gets the future of the result ids, to append with
tool mask 0 once done; the other samples keep decoding meanwhile. Otherwise the sample ends there, its calls never
run (TRL's cap). The tool messages join the exchange when they are in; a rollback removes them again, while the calls
still count (they ran), as in TRL. When the sample finishes, the engine asks :meth:`ToolTurns.ended` for its
:class:`Exchange` (the messages and the sample's environment) and returns it on ``Rollouts.exchanges``; the tool
rounds and the time samples waited are the engine's own counts (``Rollouts.tools``).

The tokenizer is used by the decoding thread (parsing) and by the workers (rendering results); a lock keeps them
apart (a fast tokenizer's Rust state must not be borrowed twice at once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase

from infgrpo.agent.calls import ToolWorkers
from infgrpo.agent.chat import parse_turn, tool_suffix_ids
from infgrpo.agent.environments import AgentError
from infgrpo.agent.tools import ToolBox
from infgrpo.sampler.schedule.sequence import Sequence as Sample

Key = tuple[int, int]
"""(prompt index, sample index): one sample of a rollout."""


@dataclass
class Exchange:
    """What one finished sample recorded (``Rollouts.exchanges``): what TRL's rewards get for its completion."""

    messages: list[dict[str, Any]]
    """Its assistant turns with the tool messages that answered them (the rewards' ``completions`` entry)."""
    environment: Any = None
    """Its environment instance (the rewards' ``environments`` entry; None without ``agent.environment``)."""
    prompt: Any = None
    """The prompt it decoded, as TRL's rewards get it (the row's with its environment's observation appended; the
    rewards' ``prompts`` entry); None: its row's prompt as the dataset gave it."""


def check_text_results(key: Key, messages: list[dict[str, Any]]) -> None:
    """An :class:`~infgrpo.agent.environments.AgentError` naming the sample and the tool when a tool result holds an
    image block (TRL 1.16 passes such results to a VLM; infgrpo reads tool results as text, its images come from the
    prompt's image column)."""
    for message in messages:
        content = message["content"]
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "image" for b in content):
            raise AgentError(
                f"sample {key[1]} of prompt {key[0]}: tool {message.get('name', '?')!r} returned an image block; "
                "infgrpo reads tool results as text (images enter through the data's image column): return a string "
                "or text blocks"
            )


class ToolTurns:
    """The tool side of one rollout's turns (see the module docstring).

    Args:
        tokenizer: the policy's tokenizer, with a response template (see :mod:`infgrpo.agent.chat`).
        boxes: each sample's tools: one :class:`ToolBox` per prompt, or a function of (prompt index, sample index)
            (:meth:`Environments.box <infgrpo.agent.environments.Environments.box>`: a box per sample).
        template: the chat template (None: the tokenizer's own), as the prompts were rendered.
        kwargs: the chat template's options (``data.chat_template_kwargs``), as the prompts were rendered.
        max_turns: most tool rounds a sample runs (None: unbounded).
        workers: where the tools run, shared by rollouts; an int makes (and :meth:`close` ends) this rollout's own.
        environments: each sample's environment instance, a function of (prompt index, sample index), recorded in
            its :class:`Exchange`; None without environments.
        prompts: each sample's prompt with its observation (messages or a string), a function of (prompt index,
            sample index), recorded in its :class:`Exchange`; None without environments.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        boxes: Sequence[ToolBox] | Callable[[int, int], ToolBox],
        template: str | None = None,
        kwargs: dict[str, Any] | None = None,
        max_turns: int | None = None,
        workers: ToolWorkers | int = 8,
        environments: Callable[[int, int], Any] | None = None,
        prompts: Callable[[int, int], Any] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self._box = boxes if callable(boxes) else (lambda i, j: boxes[i])
        self.template = template
        self.kwargs = dict(kwargs or {})
        self.max_turns = max_turns
        self._owned = isinstance(workers, int)
        self.workers = ToolWorkers(workers) if isinstance(workers, int) else workers
        self._environment = environments
        self._prompt = prompts
        self._lock = threading.Lock()  # the exchanges and counters: the decoding thread and the workers write them
        self._tokenizer_lock = threading.Lock()
        self._exchanges: dict[Key, list[dict[str, Any]]] = {}
        self._parsed: dict[Key, int] = {}  # the turn_start of each sample's last parsed turn
        self._results_from: dict[Key, int] = {}  # where each sample's last tool messages start in its exchange
        self.calls = self.failures = self.timeouts = self.dropped = 0
        """Tool calls run this rollout, those that failed, those that timed out, and tool results the engine dropped
        as too long (TRL's rollback): the engine's ToolSummary."""

    def turn_ended(self, seq: Sample, prompt: list[int]) -> Future[list[int]] | None:
        """A turn of ``seq`` ended on a stop token: parses it into the exchange, and returns the future of its tool
        results' ids (the tool messages and the next generation prompt) when it called tools and ``max_turns``
        allows another round; None when the sample ends here."""
        key, box = (seq.row_idx, seq.sample_idx), self._box(seq.row_idx, seq.sample_idx)
        message = self._parse(key, seq, prompt, box)
        calls = message.get("tool_calls")
        if not calls or (self.max_turns is not None and seq.turns >= self.max_turns):
            return None
        return self.workers.submit(self._answer, key, calls, box)

    def _parse(self, key: Key, seq: Sample, prompt: list[int], box: ToolBox) -> dict[str, Any]:
        """Parses the turn that starts at ``seq.turn_start`` and appends it to the sample's exchange."""
        start = seq.turn_start
        with self._tokenizer_lock:
            message = parse_turn(self.tokenizer, seq.token_ids[start:], [*prompt, *seq.token_ids[:start]], box.schemas)
        with self._lock:
            self._exchanges.setdefault(key, []).append(message)
            self._parsed[key] = start
        return message

    def _answer(self, key: Key, calls: list[dict[str, Any]], box: ToolBox) -> list[int]:
        """On a worker: runs the turn's calls, records their messages and returns the ids that follow the turn (an
        :class:`~infgrpo.agent.environments.AgentError` naming the sample when its results cannot be rendered)."""
        result = self.workers.run(calls, box)  # agent.tool_timeout bounds each call; outcomes tallied
        check_text_results(key, result.messages)
        try:
            with self._tokenizer_lock:
                suffix = tool_suffix_ids(self.tokenizer, result.messages, self.template, self.kwargs)
        except Exception as err:  # noqa: BLE001 - the template's or a result's failure: one line naming the sample
            names = ", ".join(m.get("name", "?") for m in result.messages)
            raise AgentError(
                f"sample {key[1]} of prompt {key[0]}: the chat template could not render its tool results ({names}): "
                f"{type(err).__name__}: {err}"
            ) from err
        with self._lock:
            exchange = self._exchanges[key]
            self._results_from[key] = len(exchange)
            exchange.extend(result.messages)
            self.calls += result.calls
            self.failures += result.failures
            self.timeouts += result.timeouts
        return suffix

    def rolled_back(self, seq: Sample) -> None:
        """The engine dropped ``seq``'s last tool results (they would pass ``max_new_tokens`` or the context): its
        exchange loses them and ends with the turn that called the tools (TRL's rollback; the counts stay)."""
        key = (seq.row_idx, seq.sample_idx)
        with self._lock:
            del self._exchanges[key][self._results_from.pop(key) :]
            self.dropped += 1

    def ended(self, seq: Sample, prompt: list[int]) -> Exchange:
        """``seq`` is done: its last turn is parsed into the exchange if the engine did not offer it (a turn cut
        by ``max_new_tokens``; an empty one adds nothing, as in TRL); returns its :class:`Exchange`."""
        key = (seq.row_idx, seq.sample_idx)
        if self._parsed.get(key) != seq.turn_start and len(seq.token_ids) > seq.turn_start:
            self._parse(key, seq, prompt, self._box(*key))
        environment = self._environment(*key) if self._environment is not None else None
        return Exchange(self.exchange(*key), environment, self._prompt(*key) if self._prompt is not None else None)

    def exchange(self, i: int, j: int) -> list[dict[str, Any]]:
        """Sample ``j`` of prompt ``i`` as messages, TRL's completion: its assistant turns with the tool messages
        that answered them (a copy)."""
        with self._lock:
            return list(self._exchanges.get((i, j), []))

    def close(self) -> None:
        """Ends the workers when this rollout made its own (a shared one is left to its owner)."""
        if self._owned:
            self.workers.close()
