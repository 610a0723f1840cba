"""The files a run reads and writes: its ``--config`` files before parsing, its folders when fit starts.

    config_file_problem(["--config", "run.yaml"])   # 'run.yaml line 2: a tab indents it; ...', or None
    check_writable_folder("model.output_dir", "adapter", Path("runs/tiny/adapter"))   # ConfigError if it cannot be
    rescued = write_trained(policy, tokenizer, Path("runs/tiny/adapter"), rescue=Path("runs/tiny/grpo/version_0"))
    rescued = write_output_dir(trainer, policy, tokenizer, "adapter", "adapter", lambda: None)  # every rank

jsonargparse reports a YAML error as ``Problems parsing config: ... in "<unicode string>", line 2``: no file name,
and a tab (the most common cause) is "a character that cannot start any token". :func:`config_file_problem` names
the file, the line and, for a tab, says that YAML indents with spaces only.

:func:`check_writable_folder` runs before anything loads (the command line) and again when fit starts (the Python
API): a folder that exists or can be created, and can be written; not a file, nor under one. It writes and removes
one probe (a file in an existing folder, a folder in the nearest existing parent of a missing one), so it leaves
nothing behind and data-parallel ranks checking at once do not race.

The check cannot see a disk filling up or a folder changed during training: :func:`write_trained` then writes the
model to ``<rescue>/trained-model`` (the run's version folder) and prints one line saying where, instead of losing
what was trained.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from infgrpo.policy.load import resolve_output_dir, save_trained
from infgrpo.settings import ConfigError, config_paths

RESCUE_NAME = "trained-model"


def check_writable_folder(key: str, value: str, path: Path) -> None:
    """Raises a ConfigError naming ``key`` and ``value`` unless ``path`` is a folder that exists or can be created,
    and can be written."""
    valid = "give a folder that can be created and written"
    named = f"{key}={value!r}" + ("" if Path(value).expanduser() == path else f" ({path})")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = "is a file" if existing == path else f"lies under the file {existing}"
        raise ConfigError(f"{named} {where}, not a folder: {valid}")
    try:
        if existing == path:
            with tempfile.TemporaryFile(dir=path, prefix=".infgrpo-probe-"):
                pass
        else:  # the first missing level could be created (deeper ones then can too)
            Path(tempfile.mkdtemp(dir=existing, prefix=".infgrpo-probe-")).rmdir()
    except OSError as err:
        what = "written" if existing == path else f"created: {existing} takes no new folder"
        raise ConfigError(f"{named} cannot be {what} ({err.strerror or err}); {valid}") from err


def write_trained(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    path: Path,
    rescue: Path,
    what: str = "model",
    state_dict: dict | None = None,
) -> Path | None:
    """Writes ``model`` and ``tokenizer`` to ``path`` and prints where; if that fails, to ``rescue/trained-model``.

    Returns None when ``path`` was written, else the folder the model was rescued to (one ``error:`` line on
    stderr says why and where). Raises when the rescue fails too.
    """
    try:
        save_trained(model, tokenizer, path, state_dict)
    except Exception as err:  # noqa: BLE001 - safetensors, torch and the OS raise different types: any is a failed write
        target = rescue / RESCUE_NAME
        save_trained(model, tokenizer, target, state_dict)
        reason = f"{type(err).__name__}: {err}".splitlines()[0]
        print(
            f"[infgrpo] error: could not write the trained {what} to {path.resolve()} ({reason}); "
            f"wrote it to {target.resolve()} instead",
            file=sys.stderr,
            flush=True,
        )
        return target
    print(f"[infgrpo] wrote the trained {what} to {path.resolve()}")
    return None


def write_output_dir(
    trainer: Any,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: str,
    what: str,
    full_state: Callable[[], dict | None],
) -> Path | None:
    """``GRPOModule.on_train_end``'s write: :func:`write_trained` of ``model`` to ``output_dir`` (relative: under
    the run's root) from global rank 0, rescued into the run's version folder; every rank calls it (``log_dir`` is a
    broadcast under DDP) and waits for the write. ``full_state()``: the full state of a sharded model (a collective:
    rank 0 gets it), else None."""
    rescue = Path(trainer.log_dir or trainer.default_root_dir)  # a collective: on every rank
    state, rescued = full_state(), None
    if trainer.is_global_zero:
        path = resolve_output_dir(output_dir, trainer.default_root_dir)
        rescued = write_trained(model, tokenizer, path, rescue, what, state)
    trainer.strategy.barrier("output_dir")
    return rescued


@dataclass
class RunOutput:
    """``model.output_dir`` of a run, written once: at the end of fit, or first thing when a signal stops the run."""

    output_dir: str | None
    """Where (None: nothing is written)."""
    what: str
    """What is written: ``adapter`` (LoRA) or ``model``."""
    written: bool = False
    rescued_to: Path | None = None
    """Where the model went when ``output_dir`` failed (fit then exits 1), else None."""

    path: Path | None = None
    """Where the model is once written: ``output_dir`` resolved under the run's root, or the rescue folder."""

    def write(self, trainer: Any, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, full_state: Any) -> None:
        """:func:`write_output_dir`, unless it ran already (every rank calls it)."""
        if self.output_dir and not self.written:
            self.written = True
            self.rescued_to = write_output_dir(trainer, model, tokenizer, self.output_dir, self.what, full_state)
            self.path = self.rescued_to or resolve_output_dir(self.output_dir, trainer.default_root_dir).resolve()


def check_run_folders(config: Any) -> None:
    """Raises a ConfigError unless ``trainer.default_root_dir`` and ``model.output_dir`` (relative: under the root)
    are folders that exist or can be created, and can be written: found before training, not after it."""
    root = config["trainer"].get("default_root_dir")
    if root:
        check_writable_folder("trainer.default_root_dir", root, Path(root).expanduser())
    output = config["model"].get("output_dir")
    if output:
        check_writable_folder("model.output_dir", output, resolve_output_dir(output, root or os.getcwd()))


def yaml_problem(path: str) -> str | None:
    """What keeps the file ``path`` from being read as YAML (its name, line and the reason), or None when it reads,
    or when it is no readable file (the parser then says so, or reads the value as inline YAML)."""
    try:
        text = Path(path).expanduser().read_text()
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    for number, line in enumerate(text.splitlines(), start=1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent and line.strip() and not line.lstrip().startswith("#"):
            return (
                f"--config {path} line {number}: a tab indents it, and YAML allows only spaces for indentation "
                "(replace the tab with spaces)"
            )
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        return f"--config {path}{where} is not valid YAML: {problem}"
    return None


def config_file_problem(argv: list[str]) -> str | None:
    """The first :func:`yaml_problem` among the ``--config`` files of ``argv``, or None."""
    return next((p for p in map(yaml_problem, config_paths(argv)) if p is not None), None)
