"""The transforms of the run around the model: the learning-rate schedule, the run's length, the devices, logging,
the output folder, checkpoints and resuming, held-out evaluation and the model's name (the data's:
:mod:`~infgrpo.trl.transforms.data`).

Each function converts the TRL fields it is registered for (:meth:`~.registry.Transforms.converts`) and runs once,
in the order they stand here, after those of :mod:`~infgrpo.trl.transforms.model`. TRL counts optimizer steps,
Lightning (``trainer.*``) counts rollouts, each of which makes ``num_iterations`` optimizer steps.
"""

from __future__ import annotations

import math
from typing import Any

from infgrpo.trl.fields import ConversionError
from infgrpo.trl.keys import Keys
from infgrpo.trl.transforms.registry import Transforms
from infgrpo.trl.trl_settings import TrlSettings

TRL_LR_SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant", "constant_with_warmup": "constant"}
"""transformers' schedules that infgrpo has (``model.optimizer.lr_scheduler_type``)."""

CHECKPOINT_CALLBACK = "lightning.pytorch.callbacks.ModelCheckpoint"

TRANSFORMS = Transforms()
"""This module's transforms by TRL field."""


def _steps(trl: TrlSettings, name: str, notes: list[str], value: Any = None, key: str = "") -> int | None:
    """``trl[name]`` (or ``value``) in optimizer steps: a float < 1 is transformers' share of ``max_steps`` (None
    when that is unknown: a note names ``key``, the setting to write the steps to)."""
    value = trl[name] if value is None else value
    if isinstance(value, float) and 0 < value < 1:
        max_steps = trl["max_steps"] or -1
        if max_steps <= 0:
            notes.append(
                f"{name}={value} is a share of the run's optimizer steps, which the config does not give (no "
                f"max_steps; num_train_epochs={trl['num_train_epochs']} over the dataset's rows): infgrpo's default is "
                f"kept; set {key or name} to ceil({value} x the run's optimizer steps), or set max_steps"
            )
            return None
        steps = math.ceil(max_steps * value)
        notes.append(f"{name}={value} of max_steps={max_steps}: {steps} optimizer steps")
        return steps
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 1:
        raise ConversionError(f"{name}={value!r} must be an integer >= 1 or a share of max_steps in (0, 1)")
    return int(value)


@TRANSFORMS.converts("warmup_steps", "warmup_ratio", "lr_scheduler_type", "weight_decay")
def _schedule(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """The learning-rate schedule (transformers' names) and its warmup; weight decay."""
    schedule = str(trl["lr_scheduler_type"])
    ours = TRL_LR_SCHEDULES.get(schedule) or ("cosine" if schedule.startswith("cosine") else "linear")
    if schedule not in TRL_LR_SCHEDULES:
        notes.append(
            f"lr_scheduler_type={schedule!r} is no infgrpo schedule (constant, linear, cosine): {ours} is used"
        )
    out.put("model.optimizer.lr_scheduler_type", ours, trl.is_set("lr_scheduler_type"))
    warmup_key = "model.optimizer.warmup_steps"
    if trl["warmup_steps"]:
        warmup = _steps(trl, "warmup_steps", notes, key=warmup_key)
        if trl["warmup_ratio"]:
            notes.append(f"warmup_ratio={trl['warmup_ratio']} ignored: warmup_steps > 0 wins, as in transformers")
    elif trl["warmup_ratio"]:  # transformers 4's share of the run's steps (5 takes a float warmup_steps)
        ratio = trl["warmup_ratio"]
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio < 1:
            raise ConversionError(f"warmup_ratio={ratio!r} must be a share of the run's steps in [0, 1)")
        warmup = _steps(trl, "warmup_ratio", notes, float(ratio), key=warmup_key)
    else:
        warmup = 0
    if warmup and schedule == "constant":
        notes.append(f"warmup_steps={warmup} dropped: transformers' constant schedule has no warmup")
        warmup = 0
    if warmup is not None:
        out.put(warmup_key, warmup, trl.any_set("warmup_steps", "warmup_ratio"))
    decay = trl["weight_decay"]
    out.put("model.optimizer.weight_decay", decay, trl.is_set("weight_decay"))
    if decay:
        notes.append(
            f"weight_decay={decay}: transformers leaves biases and LayerNorm weights out of weight decay; infgrpo's "
            "AdamW decays every trained parameter"
        )


@TRANSFORMS.converts("max_steps", "num_train_epochs")
def _run_length(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """``max_steps`` > 0 ends the run (optimizer steps, as Lightning counts them), else ``num_train_epochs``."""
    max_steps = trl["max_steps"]
    if max_steps is not None and max_steps > 0:
        out.put("trainer.max_steps", trl.integer("max_steps"), True)
        if trl.is_set("num_train_epochs"):
            notes.append(f"num_train_epochs={trl['num_train_epochs']} ignored: max_steps > 0 ends the run, as in TRL")
        return
    epochs = trl["num_train_epochs"]
    whole = max(1, math.ceil(epochs))
    if whole != epochs:
        notes.append(f"num_train_epochs={epochs}: trainer.max_epochs={whole} (Lightning runs whole epochs)")
    out.put("trainer.max_epochs", whole, True)


@TRANSFORMS.converts("full_determinism", "use_cpu")
def _switches(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """Deterministic kernels and a CPU run, when TRL asks for them."""
    if trl["full_determinism"]:
        out.put("trainer.deterministic", True, True)
    if trl["use_cpu"]:
        out.put("trainer.accelerator", "cpu", True)


def _per_rollout(trl: TrlSettings, steps: int) -> int:
    """Optimizer steps as rollouts (Lightning's batches): each rollout makes ``num_iterations`` optimizer steps."""
    return max(1, math.ceil(steps / trl.integer("num_iterations")))


@TRANSFORMS.converts("logging_steps", "log_completions", "num_completions_to_print")
def _logging(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """How often the metrics and the completion tables are logged (Lightning counts rollouts, TRL optimizer steps)."""
    steps = _steps(trl, "logging_steps", notes)
    every = _per_rollout(trl, steps) if steps is not None else None
    if every is not None:
        out.put("trainer.log_every_n_steps", every, True)
        if every != steps:
            notes.append(
                f"logging_steps={steps} optimizer steps: trainer.log_every_n_steps={every} rollouts (each makes "
                f"num_iterations={trl['num_iterations']} optimizer steps)"
            )
    if trl["log_completions"]:
        out.put("model.logging.log_completions_every_n_steps", every or out.get("trainer.log_every_n_steps") or 50)
        count = trl["num_completions_to_print"]
        if count is None:
            count = out.get("data.batch_size") * out.get("model.group_size")
            notes.append(f"num_completions_to_print=None (all): a step's {count} completions per rank")
        out.put("model.logging.num_completions_to_log", count, True)
    elif trl.is_set("num_completions_to_print"):
        notes.append("num_completions_to_print ignored: log_completions is false")


@TRANSFORMS.converts("output_dir")
def _output(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """TRL's ``output_dir`` holds the checkpoints and the trained model: the run's root and ``model.output_dir``."""
    root = trl["output_dir"] or "trainer_output"  # transformers' default
    out.put("trainer.default_root_dir", root, True)
    out.put("model.output_dir", ".", True)
    notes.append(
        f"output_dir={root!r}: trainer.default_root_dir (logs and checkpoints in {root}/grpo/version_N/) and "
        "model.output_dir: '.' (relative to the root: the trained model, or LoRA adapter, written into "
        f"{root} itself, as TRL's save_model)"
    )


@TRANSFORMS.converts("save_strategy", "save_steps", "save_total_limit", "save_only_model")
def _checkpoints(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """Checkpoints: a Lightning ``ModelCheckpoint`` as ``configs/*.yaml`` have it, every ``save_steps`` steps."""
    strategy = trl["save_strategy"]
    if strategy == "no":
        out.put("trainer.enable_checkpointing", False, True)
        notes.append("save_strategy=no: trainer.enable_checkpointing: false (no checkpoints)")
        return
    init: dict[str, Any] = {}
    if strategy == "epoch":
        init["every_n_epochs"] = 1
        where = "every epoch"
    else:
        steps = _steps(trl, "save_steps", notes, key="the ModelCheckpoint's every_n_train_steps") or 500
        every = _per_rollout(trl, steps) * trl.integer("num_iterations")  # Lightning checks after each rollout
        if every != steps:
            notes.append(f"save_steps={steps}: every {every} optimizer steps (a multiple of num_iterations)")
        init["every_n_train_steps"] = every
        where = f"every {every} optimizer steps"
        if strategy == "best":
            notes.append("save_strategy=best needs a monitored metric (ModelCheckpoint's monitor): saved " + where)
    init["save_last"] = True
    limit = trl["save_total_limit"]
    init["save_top_k"] = 1 if limit == 1 else -1
    if limit not in (None, 1):
        notes.append(
            f"save_total_limit={limit}: Lightning's ModelCheckpoint without a monitored metric keeps every "
            "checkpoint (save_top_k: -1) or the newest (1): every one is kept"
        )
    if trl["save_only_model"]:
        init["save_weights_only"] = True
        notes.append("save_only_model=True: save_weights_only (such checkpoints cannot resume a run, as in TRL)")
    out.put("trainer.callbacks", [{"class_path": CHECKPOINT_CALLBACK, "init_args": init}], True)
    notes.append(
        f"checkpoints: a ModelCheckpoint {where} in the run's checkpoints/ folder, with last.ckpt "
        "(resume: --ckpt_path last), as configs/*.yaml have it"
    )


@TRANSFORMS.converts("resume_from_checkpoint")
def _resume(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """TRL's ``resume_from_checkpoint: true`` (the newest checkpoint of the run) is infgrpo's ``--ckpt_path last``."""
    value = trl["resume_from_checkpoint"]
    if value is True or (isinstance(value, str) and value.lower() == "true"):
        out.put("ckpt_path", "last", True)
        notes.append("resume_from_checkpoint=True: ckpt_path: last (the newest last.ckpt of the run's folder)")
    elif value:
        notes.append(
            f"resume_from_checkpoint={value!r} not mapped: a TRL checkpoint folder cannot resume an infgrpo run "
            "(a Lightning .ckpt can: --ckpt_path)"
        )


@TRANSFORMS.converts("eval_strategy", "eval_steps", "dataset_test_split")
def _evaluation(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """Held-out evaluation: none unless ``eval_strategy`` asks, then on ``dataset_test_split``."""
    strategy = trl["eval_strategy"]
    if strategy == "no":
        out.put("data.eval_split", None, trl.is_set("dataset_test_split"))
        if trl.any_set("dataset_test_split", "eval_steps"):
            notes.append("dataset_test_split and eval_steps ignored: eval_strategy=no (no held-out evaluation)")
        return
    out.put("data.eval_split", trl["dataset_test_split"], True)
    if strategy == "steps":
        given = trl["eval_steps"] if trl["eval_steps"] is not None else trl["logging_steps"]  # TRL's fallback
        steps = _steps(trl, "eval_steps", notes, given)
        if steps is not None:
            out.put("trainer.val_check_interval", _per_rollout(trl, steps), True)
            out.put("trainer.check_val_every_n_epoch", None, True)  # val_check_interval counts across epochs
    notes.append(
        "held-out evaluation: one completion per prompt of data.eval_split (the first data.eval_size) at "
        "model.evaluation.temperature (0: greedy); TRL's samples num_generations_eval per prompt"
    )


def named(trl: TrlSettings, out: Keys, notes: list[str], name: str, key: str) -> None:
    """Copies what TRL's script names (its dataset, its model) to ``key``; a note when the config names none (a
    ``GRPOConfig`` alone does not): infgrpo's default, the tiny one, stays."""
    if trl[name] is None:
        notes.append(f"no {name}: {key} stays infgrpo's default (tiny): set it")
    else:
        out.put(key, trl[name], True)


@TRANSFORMS.converts("model_name_or_path")
def _model_name(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """``model.policy.model_name_or_path`` (a ``GRPOConfig`` alone names no model)."""
    named(trl, out, notes, "model_name_or_path", "model.policy.model_name_or_path")
