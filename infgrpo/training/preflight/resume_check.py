"""A resumed run (``--ckpt_path``) compared with its checkpoint before the model loads: steps left, data, groups.

    check_resume(ckpt_path, state, config, settings)   # a ConfigError, or an ``[infgrpo]`` warning per change

``state`` is the checkpoint as :func:`~infgrpo.training.preflight.checkpoints.check_checkpoint_path` read it (through a
memory map: no tensor is read); its top level gives ``global_step``, the module's and the
data module's hyper-parameters (``hyper_parameters``, ``datamodule_hyper_parameters``) and the data module's saved
position (``PromptDataModule``: the epoch and the prompts of it consumed, in the shuffled order). Then:

- a checkpoint at or past ``trainer.max_steps`` has nothing to train (Lightning loaded the model, trained nothing
  and, with ``model.output_dir``, wrote it again): an error;
- other training data (``data.path``, ``config_name``, ``train_split``, ``train_size``, ``eval_fraction``, a task's
  ``task_config`` / ``task_seed``), another ``model.group_size`` or ``data.batch_size``: a warning that says what the
  resumed run does with the saved position; an error where the position cannot apply (past the new data's rows, or
  counted in batches of another size by a checkpoint of an older infgrpo);
- other tools or environments than the checkpoint's run called (``model.agent.tools``, ``model.agent.environment``,
  each by import path), or none: a warning (the policy learnt to call the checkpoint's tools);
- another ``trainer.max_steps`` under a ``linear`` or ``cosine`` schedule (the checkpoint's is ``infgrpo_max_steps``):
  a printed note naming both, since the schedule decays over the new count from the resumed step on (a note: a run
  resumed to train more steps is common, and meant);
- a checkpoint holding only LoRA's weights (:mod:`~infgrpo.training.checkpoint_state`) given to a sharded run: an error.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infgrpo.settings import ConfigError, InfgrpoWarning
from infgrpo.training.checkpoint_state import trimmed_for_sharding
from infgrpo.training.compat_v01 import group_flat_hparams
from infgrpo.training.optim import lr_factor
from infgrpo.training.preflight.checkpoints import is_distributed_checkpoint
from infgrpo.training.preflight.data_check import training_rows
from infgrpo.training.preflight.trainer_check import is_sharded_strategy, world_size

DATA_IDENTITY = ("path", "config_name", "train_split", "train_size", "eval_fraction", "task_config", "task_seed")
"""The data settings that decide which rows are the training rows (and so what the saved position points at)."""
DATA_STATE = "PromptDataModule"
"""Where Lightning keeps the data module's state in a checkpoint (its class name)."""


def check_steps_left(ckpt_path: str, step: Any, max_steps: Any) -> None:
    """A ConfigError when the checkpoint's ``global_step`` is at or past ``trainer.max_steps`` (-1: no limit)."""
    if not isinstance(step, int) or not isinstance(max_steps, int) or max_steps < 0 or step < max_steps:
        return
    raise ConfigError(
        f"--ckpt_path={ckpt_path!r}: the checkpoint is at step {step} and trainer.max_steps={max_steps}: nothing to "
        f"train; raise trainer.max_steps above {step} (it counts from the run's start: --trainer.max_steps "
        f"{step + max_steps} trains {max_steps} more)"
    )


def same_value(key: str, before: Any, now: Any) -> bool:
    """Whether a data setting is unchanged; local paths compare by the file or folder they name."""
    if before == now:
        return True
    if key == "path" and isinstance(before, str) and isinstance(now, str):
        old, new = Path(before).expanduser(), Path(now).expanduser()
        return old.exists() and new.exists() and old.resolve() == new.resolve()
    return False


def data_changes(saved: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
    """``data.<key>=<now> (the checkpoint's: <before>)`` for each of :data:`DATA_IDENTITY` that differs."""
    defaults = {"eval_fraction": 0.0, "task_seed": 0, "train_split": "train"}
    changed = []
    for key in DATA_IDENTITY:
        if key not in saved and key not in defaults:
            continue
        before, now = saved.get(key, defaults.get(key)), data.get(key, defaults.get(key))
        if not same_value(key, before, now):
            changed.append(f"data.{key}={now!r} (the checkpoint's: {before!r})")
    return changed


def position_words(position: Mapping[str, Any]) -> str:
    """``epoch 0, 48 prompts consumed``: the saved position, said."""
    return f"epoch {position.get('epoch', 0)}, {position.get('consumed_prompts', 0)} prompts consumed"


def check_data_position(
    ckpt_path: str,
    state: Mapping[str, Any],
    data: Mapping[str, Any],
    group_size: int,
    world: int = 1,
    agent: Any = None,
) -> None:
    """The data, group and agent (``agent``: the run's ``AgentConfig``) checks of the module for a run of ``world``
    ranks: a ConfigError where the saved position cannot apply, else a warning per change."""
    saved = state.get("datamodule_hyper_parameters")
    saved = saved if isinstance(saved, Mapping) else {}
    position = (state.get(DATA_STATE) or {}).get("sampler") if isinstance(state.get(DATA_STATE), Mapping) else None
    where = f"--ckpt_path={ckpt_path!r}"
    found = []
    changed = data_changes(saved, data)
    if changed and position is not None:
        rows = training_rows(data)
        consumed = int(position.get("consumed_prompts", 0))
        if rows is not None and consumed > rows:
            raise ConfigError(
                f"{where}: {', '.join(changed)}: the checkpoint's data position ({position_words(position)}) is past "
                f"the {rows} training rows of this data; resume with the checkpoint's data settings, or drop "
                "--ckpt_path to start a new run (model.policy.model_name_or_path can start from a model that "
                "model.output_dir wrote)"
            )
        found.append(
            f"{', '.join(changed)}: the saved data position still applies, so the resumed run starts epoch "
            f"{position.get('epoch', 0)} of this data's shuffled order after its first {consumed} prompts"
        )
    elif changed:
        found.append(f"{', '.join(changed)}: the resumed run trains on other data than the checkpoint's")
    size, before = data.get("batch_size"), saved.get("batch_size")
    if isinstance(before, int) and size != before:
        if position is not None and "consumed_prompts" not in position:  # counted in batches (an older infgrpo)
            raise ConfigError(
                f"{where}: data.batch_size={size} differs from the checkpoint's {before}, and the checkpoint counts "
                "its data position in batches (an older infgrpo), which batches of another size cannot resume; "
                f"resume with --data.batch_size {before}"
            )
        ranks = size * world // before if size * world % before == 0 else None
        same = f" (the same {size * world} prompts a step if the checkpoint's run had {ranks} ranks)" if ranks else ""
        found.append(
            f"data.batch_size={size} differs from the checkpoint's {before}: the saved data position (counted in "
            f"prompts) carries over, and each step now takes {size} prompts per rank{same}"
        )
    hparams = state.get("hyper_parameters")
    saved_group = group_flat_hparams(hparams).get("group_size") if isinstance(hparams, Mapping) else None
    if isinstance(saved_group, int) and saved_group != group_size:
        found.append(
            f"model.group_size={group_size} differs from the checkpoint's {saved_group}: the resumed steps sample "
            f"{group_size} completions a prompt (the checkpoint's steps sampled {saved_group}); its optimizer state "
            "and data position carry over"
        )
    if agent is not None and isinstance(hparams, Mapping):
        found += agent_changes(hparams.get("agent"), agent)
    for message in found:
        warnings.warn(f"[infgrpo] {where}: {message}", InfgrpoWarning, stacklevel=1)


def agent_changes(saved: Mapping[str, Any] | None, agent: Any) -> list[str]:
    """What differs between the checkpoint's agent settings (``hyper_parameters["agent"]``; None: a checkpoint of an
    infgrpo without agents, or of a run without them) and ``agent`` (an ``AgentConfig``), by import path: the tools,
    the environment."""
    saved = saved if isinstance(saved, Mapping) else {}
    now = agent.recorded()
    before = {"tools": list(saved.get("tools") or []), "environment": saved.get("environment")}
    changed = [
        f"model.agent.{key}={now[key]!r} (the checkpoint's: {before[key]!r})"
        for key in ("tools", "environment")
        if (list(now[key]) if key == "tools" else now[key]) != before[key]
    ]
    if not changed:
        return []
    if not agent.enabled:
        return [
            f"{', '.join(changed)}: the checkpoint's run called tools, and the resumed steps decode without any (its "
            "policy learnt to call them); resume with the checkpoint's model.agent settings"
        ]
    what = "called no tools" if not (before["tools"] or before["environment"]) else "called other tools"
    return [
        f"{', '.join(changed)}: the checkpoint's run {what}; the resumed steps render and run these (its policy, "
        "optimizer state and data position carry over)"
    ]


def schedule_change(step: Any, before: Any, max_steps: Any, optimizer: Any) -> str | None:
    """What resuming at ``step`` under ``trainer.max_steps`` ``max_steps`` instead of the checkpoint's ``before``
    does to a decaying schedule of ``optimizer`` (an ``OptimizerConfig``): None when nothing changes or either run
    has no step limit (``max_epochs`` ends it)."""
    schedule, warmup = optimizer.lr_scheduler_type, optimizer.warmup_steps
    counts = all(isinstance(n, int) and not isinstance(n, bool) for n in (step, before, max_steps))
    if schedule == "constant" or not counts or before == max_steps or min(before, max_steps) <= warmup:
        return None
    was, now = (lr_factor(schedule, warmup, total)(step) for total in (before, max_steps))
    return (
        f"trainer.max_steps={max_steps} differs from the checkpoint's run ({before}): the {schedule} learning-rate "
        f"schedule decays to 0 at step {max_steps} instead, so at step {step} the rate is {now:.3g} x "
        f"model.optimizer.learning_rate (the checkpoint's schedule: {was:.3g} x); --trainer.max_steps {before} "
        "keeps the checkpoint's schedule"
    )


def check_resume(ckpt_path: str | None, state: Mapping[str, Any] | None, config: Any, settings: Any) -> None:
    """The checks of the module for ``--ckpt_path`` (its checkpoint ``state``) against the parsed ``config``
    (trainer, data) and the checked ``settings`` (a ``ModuleSettings``); nothing without a local checkpoint file."""
    if ckpt_path is None or state is None:
        return
    if is_distributed_checkpoint(Path(ckpt_path).expanduser()) and not is_sharded_strategy(
        config["trainer"].get("strategy")
    ):
        raise ConfigError(
            f"--ckpt_path={ckpt_path!r} is a distributed checkpoint (a folder of shards, written with "
            "save_distributed_checkpoint: true), which only a sharded run loads: resume it with trainer.strategy: "
            "infgrpo.FSDP2Strategy (or fsdp2) and the checkpoint's number of processes"
        )
    only_lora = trimmed_for_sharding(state) if is_sharded_strategy(config["trainer"].get("strategy")) else None
    if only_lora:
        raise ConfigError(f"--ckpt_path={ckpt_path!r} {only_lora}")
    check_steps_left(ckpt_path, state.get("global_step"), config["trainer"].get("max_steps"))
    change = schedule_change(
        state.get("global_step"), state.get("infgrpo_max_steps"), config["trainer"].get("max_steps"), settings.optimizer
    )
    if change:  # a note, not a warning: a run resumed to train more steps is common, and meant
        print(f"[infgrpo] note: --ckpt_path={ckpt_path!r}: {change}", flush=True)
    data = config["data"]
    data = data.as_dict() if hasattr(data, "as_dict") else dict(data)
    check_data_position(ckpt_path, state, data, settings.group_size, world_size(config["trainer"]), settings.agent)
