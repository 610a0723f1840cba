"""Rows for an environment that owns its data (``data.path: null``): TRL's placeholder rows, each with a seed.

    rows = placeholder_rows(3, seed=0)   # [{"prompt": [{"role": "user", "content": ""}], "seed": 1416...}, ...]
    rows[0] == placeholder_rows(1, seed=0)[0]          # row i depends on (seed, i) only, not on how many

TRL 1.16 trains a single ``environment_factory`` without a ``train_dataset``: every prompt is one empty user message
that ``reset()``'s string fills, and ``max_steps`` sets the run's length. So does infgrpo with ``data.path: null``
and one ``model.agent.environment``: the data module holds ``trainer.max_steps`` x the global batch of these rows, in
order (no shuffle: they differ only in their seed), and the environment writes each prompt's user message.

**Resuming.** The rows are all alike, so what the environment draws decides what a run trains on, and a resumed run
sees what an uninterrupted one sees only if those draws come back. The rule: each row carries its own ``seed``
column, a function of the run's data seed (``data.seed``, by default ``seed_everything``) and the row's place, so
``reset(prompt=..., seed=...)`` receives it among the row's columns. An environment that draws its task from
``random.Random(seed)`` (gymnasium's ``reset(seed=...)`` convention) gives every run, resumed or not, the same tasks
at the same steps, and the same task to every sample of a row (a GRPO group: one prompt, several answers). The
saved data position restores where the rows continue. An environment that draws from its own state instead (an
unseeded ``random``, a counter kept across resets) still trains, but a resumed run then sees other tasks than an
uninterrupted one.

Held-out rows (``data.eval_split`` set, no ``eval_path`` / ``eval_dataset``): ``data.eval_size`` rows with seeds of
their own, the same at every evaluation, so ``val/*`` compares one set of tasks across the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infgrpo.data.row_sources import given_held_out
from infgrpo.runtime.seeds import derive_seed
from infgrpo.settings import ConfigError

EMPTY_PROMPT: tuple[dict[str, str], ...] = ({"role": "user", "content": ""},)
"""The prompt of a placeholder row (TRL's): one empty user message."""
SEED_COLUMN = "seed"
"""The column that carries each placeholder row's seed to ``reset``."""
TRAIN, HELD_OUT = 0, 1
"""The seed streams of the training and the held-out rows."""


def placeholder_row(seed: int, index: int, split: int = TRAIN) -> dict[str, Any]:
    """Placeholder row ``index`` of ``split`` (:data:`TRAIN` or :data:`HELD_OUT`) for the data seed ``seed``: the
    empty user message and a seed in [0, 2**31) derived from (``seed``, ``split``, ``index``)."""
    return {"prompt": [dict(m) for m in EMPTY_PROMPT], SEED_COLUMN: derive_seed(seed, 3, split, index) % 2**31}


def placeholder_rows(n: int, seed: int, split: int = TRAIN) -> list[dict[str, Any]]:
    """The first ``n`` placeholder rows of ``split`` for the data seed ``seed``."""
    return [placeholder_row(seed, i, split) for i in range(n)]


def placeholder_count(max_steps: Any, batch_size: int, world: int) -> int | None:
    """Training rows of a run without data: ``trainer.max_steps`` x ``batch_size`` x ``world`` ranks; None when
    ``max_steps`` sets no length (-1, None: the caller names the setting)."""
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        return None
    return max_steps * batch_size * world


def placeholder_split(
    hp: Mapping[str, Any], max_steps: Any, world: int, eval_dataset: Any = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training rows, held-out rows) without data, for the data settings ``hp``: ``trainer.max_steps`` x the global
    batch (``world`` ranks) of placeholder rows, capped by ``train_size``; held-out rows from ``eval_dataset`` /
    ``eval_path``, else ``eval_size`` placeholder rows of their own seeds when ``eval_split`` is set."""
    n = placeholder_count(max_steps, hp["batch_size"], world)
    if n is None:
        raise ConfigError(
            f"data.path=None (no dataset: an environment writes each prompt) needs trainer.max_steps >= 1, which "
            f"sets the run's length (TRL's rule); trainer.max_steps={max_steps!r}"
        )
    train = placeholder_rows(min(n, hp["train_size"] or n), hp["seed"])
    held_out = given_held_out(hp, eval_dataset)
    if held_out is None:
        held_out = placeholder_rows(hp["eval_size"], hp["seed"], HELD_OUT) if hp["eval_split"] else []
    return train, held_out[: hp["eval_size"]]
