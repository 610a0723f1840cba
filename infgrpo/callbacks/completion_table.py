"""A small table of prompts, completions and rewards, sent to the loggers and the console.

TensorBoard gets a markdown table (``add_text``); CSV loggers get rows appended to
``completions.csv`` in their log folder; the console gets a plain table.
"""

from __future__ import annotations

import csv
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only


def _short(text: str, n: int = 120) -> str:
    text = text.replace("\n", "\\n").replace("|", "\\|")
    return text if len(text) <= n else text[: n - 3] + "..."


def _number(value: float) -> str:
    """``value`` in 3 significant digits, never ``-0`` (a negative zero prints as 0)."""
    return f"{value + 0.0:.3g}"  # -0.0 + 0.0 == +0.0


def prompt_for_table(user_text: str | None, decoded_prompt: str, n: int = 200) -> str:
    """What a completion table shows of a prompt: the user turn when known, else the prompt's *end*.

    A chat-templated prompt starts with the system prompt (SmolLM2 adds one of its own), so its
    beginning says nothing about the question; its last ``n`` characters (the user turn and the
    assistant header) do.
    """
    if user_text:
        return user_text
    text = decoded_prompt.strip()
    return text if len(text) <= n else "..." + text[-(n - 3) :]


@rank_zero_only
def log_completions(loggers: list[Logger], step: int, rows: list[dict], console: bool = True) -> None:
    """``rows``: dicts with keys prompt, completion, reward (and any other reward columns)."""
    if not rows:
        return
    keys = list(rows[0])
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            head = "| " + " | ".join(keys) + " |\n|" + "---|" * len(keys) + "\n"
            body = "".join("| " + " | ".join(_short(str(r[k])) for k in keys) + " |\n" for r in rows)
            logger.experiment.add_text("completions", head + body, global_step=step)
        elif isinstance(logger, CSVLogger):
            path = Path(logger.log_dir) / "completions.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            new = not path.exists()
            with path.open("a", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=["step", *keys])
                if new:
                    writer.writeheader()
                writer.writerows({"step": step, **r} for r in rows)
    if console:
        print(f"\n[infgrpo] step {step} completions:")
        for r in rows:
            extras = " ".join(f"{k}={_number(r[k])}" for k in keys if k not in ("prompt", "completion"))
            print(f"  {extras} | {_short(r['prompt'], 60)} -> {_short(r['completion'], 80)}")
