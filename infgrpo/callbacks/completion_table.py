"""A small table of prompts, completions and rewards, sent to the loggers and the console.

    trainer = L.Trainer(callbacks=[CompletionTable(every_n_rollouts=10, num_completions=4)])

``GRPOModule`` adds this callback itself when ``logging.log_completions_every_n_steps`` is set
(:class:`~infgrpo.training.hparams.LoggingConfig`). After a training step it reads the module's ``last_step``
(:class:`~infgrpo.training.metrics.StepRecord`): one completion of each prompt first, then the next of each,
and so on. TensorBoard gets a markdown
table (``add_text``); CSV loggers get rows appended to ``completions.csv`` in their log folder; the
console gets a plain table.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from infgrpo.training.metrics import StepRecord


def _short(text: str, n: int = 120) -> str:
    text = text.replace("\n", "\\n").replace("|", "\\|")
    return text if len(text) <= n else text[: n - 3] + "..."


def _number(value: Any) -> str:
    """``value`` in 3 significant digits, never ``-0`` (a negative zero prints as 0); a text (a reward's ``log_extra``
    column) shortened."""
    if isinstance(value, bool | int | float):
        return f"{value + 0.0:.3g}"  # -0.0 + 0.0 == +0.0
    return _short(str(value), 40)


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


def table_rows(record: StepRecord, tokenizer: PreTrainedTokenizerBase, limit: int) -> list[dict]:
    """Up to ``limit`` rows of ``record`` (one per prompt first): prompt, completion, reward (and each reward, and the
    columns the rewards logged with ``log_extra``)."""
    g, prompts = record.rollouts.group_size, len(record.batch)
    order = [p * g + j for j in range(g) for p in range(prompts)][:limit]
    ids = [record.rollouts.prompt_ids[i // g] for i in order]
    decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
    scores, parts = record.scores, record.scores.parts
    rows = []
    for prompt, i in zip(decoded, order, strict=True):
        prompt = prompt_for_table(record.batch[i // g].get("prompt_text"), prompt)  # the question, not the system
        row = {"prompt": prompt, "completion": scores.texts[i], "reward": float(scores.total[i])}
        row.update({name: float(v[i]) for name, v in parts.items() if len(parts) > 1})
        row.update({column: values[i] for column, values in scores.extra.items() if column not in row})
        rows.append(row)
    return rows


class CompletionTable(L.Callback):
    """Logs ``num_completions`` completions after rollouts 1, 1 + N, 1 + 2N, ... (N = ``every_n_rollouts``)."""

    def __init__(self, every_n_rollouts: int, num_completions: int = 4) -> None:
        self.every_n_rollouts, self.num_completions = every_n_rollouts, num_completions

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Logs the module's ``last_step`` when its rollout is one of every ``every_n_rollouts``."""
        record = getattr(pl_module, "last_step", None)
        if record is None or record.rollout_index % self.every_n_rollouts:
            return
        rows = table_rows(record, pl_module.tokenizer, self.num_completions)
        log_completions(trainer.loggers, trainer.global_step, rows)
