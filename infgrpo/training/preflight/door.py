"""The preflight's one list of checks, and the two doors that run it: the command line and the Python API.

    check_arguments(argv, known)         # GRPOCLI.parse_arguments: the command's words, before they are parsed
    settings = check_command_line(config)   # GRPOCLI.before_instantiate_classes: the parsed config, before loading
    check_fit_start(module)              # GRPOModule.on_fit_start: the Python API, before the first step

:data:`STEPS` is the order, in code. Each :class:`Step` names what it reads and how each door runs it; where a
door cannot run a step, the step says why in words, and where that door meets the same rule instead. A new check
is one ``Step`` in ``STEPS``: both doors run it from there. The command line runs its steps in two turns, because
the parser sits between them: the steps on the words (``before_parsing``) first, the others on the parsed config.

Every error names the setting, as a ConfigError (or the ValueError / TypeError of a settings group); the command
line turns it into its parser's ``error:`` line, prefixed where the step says (``model.`` for the settings'
own checks, which name ``<group>.<field>``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import torch
from transformers import PreTrainedTokenizerBase

from infgrpo.agent.chat import prepare_template
from infgrpo.data.datamodule import check_data_settings
from infgrpo.policy.load import load_tokenizer, resolve_output_dir
from infgrpo.policy.source import check_model_source
from infgrpo.runtime.hardware import check_accelerator
from infgrpo.settings import ConfigError
from infgrpo.training.compat_v01 import old_keys
from infgrpo.training.hparams import ModuleSettings, check_settings
from infgrpo.training.preflight.checkpoints import (
    check_checkpoint_name,
    check_checkpoint_path,
    checkpoint_folders,
    resolve_last,
)
from infgrpo.training.preflight.data_check import (
    check_environment_data,
    check_environment_items,
    check_system_prompt,
    check_training_data,
)
from infgrpo.training.preflight.files import check_run_folders, check_writable_folder, config_file_problem
from infgrpo.training.preflight.fit_start import check_data_prompts, check_reward_rows
from infgrpo.training.preflight.model_data import (
    check_before_loading,
    check_max_steps,
    check_reward_models,
    check_stop_tokens_of,
    check_warmup,
)
from infgrpo.training.preflight.no_effect import warn_no_effect
from infgrpo.training.preflight.resume_check import check_resume
from infgrpo.training.preflight.trainer_check import (
    check_graph_device,
    check_sharded_policy,
    check_trainer_flags,
    runs_on_cuda,
    world_size,
)
from infgrpo.training.settings_checks import check_judged_batch
from infgrpo.trl.names import trl_keys


class FitStart(Protocol):
    """What the Python API's steps read of the module as fit starts (``GRPOModule``, which imports this door)."""

    settings: ModuleSettings
    trainer: Any
    """Lightning's trainer, its ``datamodule`` set."""
    policy: Any
    judged: Any


@dataclass
class CommandLine:
    """What the command line's steps read, and what they find for the steps after them."""

    argv: list[str]
    """The command's words (``sys.argv[1:]``)."""
    known: Collection[str] = ()
    """The parser's keys (``model.group_size``, ...)."""
    config: Any = None
    """The parsed config (``model``, ``data``, ``trainer``, ``ckpt_path``); None before parsing."""
    settings: ModuleSettings | None = None
    """The checked settings (the ``settings`` step)."""
    state: dict[str, Any] | None = None
    """The ``--ckpt_path`` checkpoint, memory-mapped (the ``checkpoint`` step); None without a local file."""
    agent_template: str | None = None
    """The chat template the agent renders with (the ``agent template`` step; None: the tokenizer's own)."""

    @property
    def data(self) -> dict[str, Any]:
        """The parsed ``data`` section, as plain dicts."""
        return namespace_dict(self.config["data"])

    @cached_property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        """The policy's tokenizer (``model.policy``), loaded the first time a step asks and kept for the others."""
        policy = self.settings.policy
        return load_tokenizer(policy.model_name_or_path, policy.gguf_file)


@dataclass(frozen=True)
class Step:
    """One check: what it reads, and how each door runs it; ``python_api`` is a function, or a sentence saying why
    fit start does not run it and where the Python API meets the same rule."""

    name: str
    reads: str
    command_line: Callable[[CommandLine], None]
    python_api: Callable[[FitStart], None] | str
    """Run by :func:`check_fit_start` with the module, whose ``trainer`` and ``trainer.datamodule`` are set."""
    before_parsing: bool = False
    """The command line runs it on the words, before parsing (:func:`check_arguments`)."""
    prefix: str = ""
    """Put before the command line's error line."""


def namespace_dict(section: Any) -> dict[str, Any]:
    """A parsed section (a jsonargparse Namespace) as nested plain dicts."""
    return section.as_dict() if hasattr(section, "as_dict") else dict(section)


def mps_available() -> bool:
    """Whether torch can use Apple's MPS device here."""
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def refuse(problem: str | None) -> None:
    """Raises ``problem`` (a line) as a ConfigError, if there is one."""
    if problem:
        raise ConfigError(problem)


def settings_of(run: CommandLine) -> None:
    """The ``model`` section checked into settings (each group's own checks)."""
    run.settings = check_settings(**namespace_dict(run.config["model"]))


def checkpoint_of(run: CommandLine) -> None:
    """``--ckpt_path``: a name Lightning can take, ``last`` found across the run's versions, a file whose weights fit
    the settings (kept for the ``resume`` step)."""
    config = run.config
    check_checkpoint_name(config.get("ckpt_path"))  # best, a folder
    if config.get("ckpt_path") == "last":
        config["ckpt_path"] = resolve_last(checkpoint_folders(config["trainer"]))
        print(f"[infgrpo] --ckpt_path last: resuming from {config['ckpt_path']}", flush=True)
    run.state = check_checkpoint_path(config.get("ckpt_path"), run.settings)


def training_data_of(run: CommandLine) -> None:
    """At least one batch of prompts over the run's ranks (``long_prompts: skip`` included)."""
    check_training_data(run.data, world_size(run.config["trainer"]), lambda: run.tokenizer)


def data_settings_of(run: CommandLine) -> None:
    """Each ``data`` field by itself, then ``system_prompt`` with ``chat_template``."""
    check_data_settings(run.data)
    check_system_prompt(run.data)


def agent_template_of(run: CommandLine) -> None:
    """With ``model.agent`` on: the template renders a tool exchange, in a call format infgrpo reads, and keeps the
    prefix (or is Qwen3's, swapped as TRL swaps it): :func:`~infgrpo.agent.chat.prepare_template`; the template to
    render with is kept for the steps after it."""
    if run.settings.agent.enabled:
        run.agent_template = prepare_template(run.tokenizer, run.settings.agent)


def output_folder(module: FitStart) -> None:
    """``output_dir`` can be written, under the trainer's root when relative."""
    if module.settings.output_dir:
        path = resolve_output_dir(module.settings.output_dir, module.trainer.default_root_dir)
        check_writable_folder("output_dir", module.settings.output_dir, path)


def judged_batch(module: FitStart) -> None:
    """The data module can stream prompts, and the cap and budget of judged rollouts hold its batch."""
    if module.judged is not None:
        module.judged.check(module.trainer.datamodule)


def every_prompt(module: FitStart) -> None:
    """Every training and held-out prompt fits the model's context; the rows hold what the rewards read."""
    s, datamodule = module.settings, module.trainer.datamodule
    check_data_prompts(module.policy, datamodule, s.sampler.max_new_tokens)
    check_reward_rows(s.rewards.functions, datamodule)


def graphs_device_of(run: CommandLine) -> None:
    """``cuda_graphs: on`` needs the run on CUDA: ``trainer.accelerator`` and the machine's GPUs say where it runs."""
    accelerator = run.config["trainer"].get("accelerator")
    where = (
        f"trainer.accelerator={accelerator!r} is no CUDA device"
        if torch.cuda.is_available()
        else f"this machine has no CUDA GPU (trainer.accelerator={accelerator!r})"
    )
    check_graph_device(run.settings.sampler.cuda_graphs, runs_on_cuda(accelerator, torch.cuda.is_available()), where)


def graphs_device(module: FitStart) -> None:
    """``cuda_graphs: on`` needs the trainer's device to be CUDA (the model is there as fit starts)."""
    device = module.trainer.strategy.root_device
    check_graph_device(module.settings.sampler.cuda_graphs, device.type == "cuda", f"the run is on {device}")


BEFORE_LOADING = "GRPOModule.__init__ runs it, before it loads the model (fit starts after)"
LIGHTNING_CHECKPOINT = "trainer.fit(ckpt_path=...) is Lightning's to find and load"

STEPS: tuple[Step, ...] = (
    Step(
        "config files", "the -c / --config files: read as YAML",
        lambda run: refuse(config_file_problem(run.argv)),
        "the Python API reads no config file", before_parsing=True,
    ),
    Step(
        "infgrpo 0.1 keys", "the flags' and config files' keys under model (flat in 0.1)",
        lambda run: refuse(old_keys(run.argv)),
        "GRPOModule takes the groups only (a flat keyword is Python's TypeError)", before_parsing=True,
    ),
    Step(
        "TRL names", "the flags' and config files' keys, against the parser's",
        lambda run: refuse(trl_keys(run.argv, run.known)),
        "GRPOModule's keywords are Python's to check", before_parsing=True,
    ),
    Step("settings", "model: every group, each by itself", settings_of, BEFORE_LOADING, prefix="model."),
    Step(
        "accelerator", "trainer.accelerator, and the machine's GPUs",
        lambda run: check_accelerator(
            run.config["trainer"].get("accelerator"), torch.cuda.is_available(), mps_available()
        ),
        "L.Trainer refuses an accelerator the machine lacks when it is built",
    ),
    Step(
        "trainer flags", "trainer.strategy, accumulate_grad_batches, gradient_clip_val",
        lambda run: check_trainer_flags(run.config["trainer"]),
        "the Trainer is built; Lightning refuses accumulation and clipping under manual optimization itself",
    ),
    Step(
        "sharded settings", "trainer.strategy, model.quantization.load_in_4bit, model.sampler.cuda_graphs",
        lambda run: check_sharded_policy(
            run.config["trainer"], run.settings.quantization.load_in_4bit, run.settings.sampler.cuda_graphs
        ),
        "GRPOModule.configure_model checks the same rules on the strategy's device mesh, which exists there only",
    ),
    Step(
        "CUDA graphs", "model.sampler.cuda_graphs, against trainer.accelerator and the machine's GPUs",
        graphs_device_of, graphs_device,
    ),
    Step(
        "data settings", "data: each field, and system_prompt with chat_template",
        data_settings_of,
        "PromptDataModule checks the same rules itself: its fields when built, system_prompt as it encodes",
    ),
    Step(
        "judged batch", "dynamic_sampling, adaptive_groups, group_size and data.batch_size",
        lambda run: check_judged_batch(
            run.settings.dynamic_sampling, run.settings.adaptive_groups, run.settings.group_size,
            run.config["data"]["batch_size"],
        ),
        judged_batch, prefix="model.",
    ),
    Step(
        "model source", "model.policy: model_name_or_path and gguf_file (local, cached, or on the hub)",
        lambda run: check_model_source(run.settings.policy.model_name_or_path, run.settings.policy.gguf_file),
        BEFORE_LOADING,
    ),
    Step(
        "reward models", "model.rewards.functions: each reward model's config.json and tokenizer files (no weights)",
        lambda run: check_reward_models(run.settings.rewards.functions),
        lambda module: check_reward_models(module.settings.rewards.functions), prefix="model.rewards.functions: ",
    ),
    Step("checkpoint", "--ckpt_path: its name, and its file's settings", checkpoint_of, LIGHTNING_CHECKPOINT),
    Step(
        "resume", "the checkpoint's step and data position, against trainer, data and group_size",
        lambda run: check_resume(run.config.get("ckpt_path"), run.state, run.config, run.settings),
        LIGHTNING_CHECKPOINT,
    ),
    Step(
        "run folders", "trainer.default_root_dir and model.output_dir: folders that can be written",
        lambda run: check_run_folders(run.config), output_folder,
    ),
    Step(
        "max steps", "trainer.max_steps: -1 or >= 1",
        lambda run: check_max_steps(run.config["trainer"].get("max_steps")),
        lambda module: check_max_steps(module.trainer.max_steps),
    ),
    Step(
        "warmup", "model.optimizer: warmup_steps below trainer.max_steps for a decaying lr_scheduler_type",
        lambda run: check_warmup(run.settings.optimizer, run.config["trainer"].get("max_steps")),
        "configure_optimizers (before fit start) refuses the same in training.optim.lr_factor, naming both numbers",
    ),
    Step(
        "environment data",
        "data.path null (one model.agent.environment, trainer.max_steps); a mapping of environments: every row's "
        "environment column (command line: local rows; Python API: the data module's rows)",
        lambda run: check_environment_data(run.data, run.settings.agent, run.config["trainer"].get("max_steps")),
        lambda module: check_environment_items(module.settings.agent, module.trainer.datamodule),
    ),
    Step(
        "agent template", "model.agent: chat_template and call_format, against the tokenizer's chat template",
        agent_template_of,
        "AgentRollout runs the same prepare_template in GRPOModule.__init__, after the tokenizer loads and before the "
        "model does", prefix="model.",
    ),
    Step(
        "model and data",
        "the model's config (no weights), LoRA targets, the context and reward columns; command line: the data's "
        "first rows; Python API: the loaded model and every row",
        lambda run: check_before_loading(run.config, run.settings, lambda: run.tokenizer), every_prompt,
    ),
    Step(
        "training data", "data: at least one batch of prompts over the ranks (long_prompts: skip included)",
        training_data_of, "the data module's batch sampler refuses fewer rows than one global batch",
    ),
    Step(
        "no effect", "settings that do nothing (a warning each)",
        lambda run: warn_no_effect(run.settings, run.data),
        lambda module: warn_no_effect(module.settings, dict(getattr(module.trainer.datamodule, "hparams", {}))),
    ),
    Step(
        "stop tokens", "model.sampler.stop_token_ids, against the model's config (vocab_size)",
        lambda run: check_stop_tokens_of(
            run.settings.policy, run.settings.sampler.stop_token_ids, "model.sampler.stop_token_ids"
        ),
        "MicroGroupSampler checks them against the loaded model's vocabulary",
    ),
)  # fmt: skip
"""The preflight, in order: the command line runs every step's ``command_line``, the Python API every
``python_api`` that is a function."""


def run_steps(steps: tuple[Step, ...], run: CommandLine) -> None:
    """Each of ``steps``' ``command_line`` on ``run``; an error of a step with a ``prefix`` becomes a ConfigError
    that starts with it."""
    for step in steps:
        try:
            step.command_line(run)
        except (ValueError, TypeError) as err:
            if not step.prefix:
                raise
            raise ConfigError(f"{step.prefix}{err}") from err


def check_arguments(argv: list[str], known: Collection[str]) -> None:
    """The command line's steps on the words ``argv`` (the parser's keys ``known``), before they are parsed."""
    run_steps(tuple(s for s in STEPS if s.before_parsing), CommandLine(argv, known))


def check_command_line(config: Any) -> ModuleSettings:
    """The command line's steps on the parsed ``config``, in order; the checked settings. ``--ckpt_path last`` is
    replaced in ``config`` by the file it names."""
    run = CommandLine([], config=config)
    run_steps(tuple(s for s in STEPS if not s.before_parsing), run)
    return run.settings


def check_fit_start(module: FitStart) -> None:
    """The Python API's steps on ``module`` as fit starts (its trainer and data module set), in order."""
    for step in STEPS:
        if callable(step.python_api):
            step.python_api(module)
