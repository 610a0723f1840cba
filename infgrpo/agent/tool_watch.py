"""Tools that quietly leave a run at reward 0 say so once, with counts.

    watch = ToolWatch(timeout=60.0)                          # agent.tool_timeout
    watch(workers.take_tally(), turns.dropped, 160)   # after each rollout: an InfgrpoWarning the first time each fires

A tool run keeps going whatever its tools do, as TRL's does: a failing call becomes ``{"error": ...}`` for the model
to read. That is right for a model that called badly, and silent for a tool that cannot work. Each of these trains
at the reward a completion earns without the tool (often 0), with nothing in the log but a metric:

- every call of a tool failed in a rollout (a bug in the tool, a missing service, arguments it never accepts);
- a tool returned ``None`` (the model reads the text ``None``: a function that prints its result, or forgets to
  return it);
- a tool raised ``SystemExit`` or ``KeyboardInterrupt`` (caught: the call's error; in TRL it ends the run);
- a call did not return within ``agent.tool_timeout`` (abandoned: the call's error);
- tool results were dropped as too long (TRL's rollback: the completion plus the result pass
  ``sampler.max_new_tokens`` or the context, so the sample ends at its call, unanswered).

Each is warned the first time it happens for a tool (the last, once), with the rollout's counts and the first
error the model read; later rollouts count in the ``tools/*`` metrics.
"""

from __future__ import annotations

import warnings

from infgrpo.agent.calls import ToolTally
from infgrpo.settings import InfgrpoWarning


def tool_warnings(tally: ToolTally, dropped: int, max_new_tokens: int, timeout: float | None) -> dict[tuple, str]:
    """The warnings of one rollout's ``tally`` and ``dropped`` results, by key (``(kind, tool)``; a pure
    function)."""
    found: dict[tuple, str] = {}
    for name, calls in tally.calls.items():
        failed = sum(tally.count(kind, name) for kind in ("failed", "caught", "timeout"))
        if failed == calls and tally.count("failed", name):  # caught and timed-out calls have their own line
            found[("failed", name)] = (
                f"every call of tool {name!r} failed in this rollout ({failed} of {calls}; the first error the model "
                f"read: {str(tally.first[('failed', name)])[:120]}): a completion that needs the tool scores as one "
                "without it (often reward 0); fix the tool, or see the calls the model writes "
                "(model.logging.log_completions_every_n_steps)"
            )
        if nones := tally.count("none", name):
            found[("none", name)] = (
                f"tool {name!r} returned None for {nones} of its {calls} calls in this rollout: the model reads the "
                "text 'None' (does it print its result instead of returning it?); return the result"
            )
        if caught := tally.count("caught", name):
            found[("caught", name)] = (
                f"tool {name!r} raised SystemExit or KeyboardInterrupt in {caught} of its {calls} calls (the model "
                f"read {tally.first[('caught', name)]}): caught, each such call's result is that error and training "
                "goes on (in TRL it ends or stops the run); os._exit() or a crash in native code still ends the "
                "process: run such a tool in a subprocess"
            )
        if timeouts := tally.count("timeout", name):
            found[("timeout", name)] = (
                f"{timeouts} of tool {name!r}'s {calls} calls did not return within model.agent.tool_timeout="
                f"{timeout:g} s: each became the call's error and its sample went on (a sync call's thread is left "
                "running); raise model.agent.tool_timeout for a tool slow by design"
            )
    if dropped:
        found[("dropped",)] = (
            f"{dropped} tool results were dropped in this rollout as too long: the completion with the result would "
            f"pass model.sampler.max_new_tokens={max_new_tokens} or the model's context, so each such sample ended at "
            "its call, unanswered (TRL's rule), and scores as it stands; raise max_new_tokens, or shorten the results"
        )
    return found


class ToolWatch:
    """Warns (an :class:`~infgrpo.settings.InfgrpoWarning`) the first time each of :func:`tool_warnings` fires."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self.warned: set[tuple] = set()

    def __call__(self, tally: ToolTally, dropped: int, max_new_tokens: int) -> list[str]:
        """Warns for what this rollout's ``tally`` and ``dropped`` results (of completions of at most
        ``max_new_tokens``) show that was not warned yet; returns those messages."""
        new = {
            key: message
            for key, message in tool_warnings(tally, dropped, max_new_tokens, self.timeout).items()
            if key not in self.warned
        }
        for key, message in new.items():
            self.warned.add(key)
            warnings.warn(f"[infgrpo] {message}", InfgrpoWarning, stacklevel=2)
        return list(new.values())
