"""Train with GRPO from the command line, on LightningCLI.

    python -m infgrpo.fit --config configs/tiny.yaml
    python -m infgrpo.fit --config configs/tiny.yaml --model.group_size 16 --trainer.max_steps 50
    python -m infgrpo.fit --config configs/tiny.yaml --ckpt_path runs/tiny/grpo/version_0/checkpoints/last.ckpt
    python -m infgrpo.fit --help
    python -m infgrpo.fit --config configs/tiny.yaml --trainer.strategy ddp --trainer.devices 2   # data parallel
    python -m infgrpo.fit --config configs/tiny.yaml --trainer.strategy fsdp2 --trainer.devices 2   # sharded

Logs go to CSV (and TensorBoard when installed) under ``trainer.default_root_dir``; each run gets a
new version folder, with its checkpoints (written atomically) inside. With stdout redirected (nohup,
SLURM, CI) a plain line of progress is printed every ``trainer.log_every_n_steps`` steps
(:class:`~infgrpo.callbacks.plain_progress.PlainProgress`). Torch's CPU threads follow ``model.threads``
(``auto``: see :mod:`infgrpo.runtime.threads`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import signal
import sys
import warnings
from typing import Any

from jsonargparse import DefaultHelpFormatter, Namespace, set_parsing_settings
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities import rank_zero_only

from infgrpo.callbacks.final_checkpoint import FinalCheckpoint, final_line, no_checkpoint_note
from infgrpo.callbacks.interruption import Interruption
from infgrpo.callbacks.plain_progress import PlainProgress
from infgrpo.callbacks.progress_bar import StepProgressBar
from infgrpo.data import PromptDataModule
from infgrpo.module import GRPOModule
from infgrpo.settings import ConfigError
from infgrpo.trainer.checkpoint_io import AtomicCheckpointIO
from infgrpo.training.preflight.door import check_arguments, check_command_line

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Field docstrings of config dataclasses (SamplerConfig) become --help text.
set_parsing_settings(docstring_parse_attribute_docstrings=True)
warnings.filterwarnings("ignore", message=".*ModelCheckpoint with manual optimization.*")


def default_loggers(root: str) -> list[Logger]:
    """CSV logs under ``root/grpo/version_N``, and TensorBoard beside them when it is installed."""
    csv = CSVLogger(save_dir=root, name="grpo")
    loggers: list[Logger] = [csv]
    if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
        loggers.append(TensorBoardLogger(save_dir=root, name="grpo", version=csv.version))
    return loggers


def resolve_seeds(config: Any) -> None:
    """Sets ``model.seed`` and ``data.seed`` left null to ``seed_everything`` when that is an integer."""
    seed = config.get("seed_everything")
    if isinstance(seed, bool) or not isinstance(seed, int):
        return
    for section in ("model", "data"):
        if config.get(section) is not None and config[section].get("seed") is None:
            config[section]["seed"] = seed


class GRPOCLI(LightningCLI):
    """LightningCLI for GRPO: model and data linked, ``--ckpt_path`` to resume, atomic checkpoints."""

    def add_arguments_to_parser(self, parser) -> None:  # noqa: ANN001 - jsonargparse parser
        """Links the policy's model / GGUF file to the data module's tokenizer and adds ``--ckpt_path``."""
        parser.link_arguments("model.policy.model_name_or_path", "data.tokenizer")
        parser.link_arguments("model.policy.gguf_file", "data.gguf_file")
        parser.add_argument("--ckpt_path", type=str | None, default=None, help="checkpoint to resume from")

    def parse_arguments(self, parser, args) -> None:  # noqa: ANN001 - jsonargparse parser and arguments
        """Refuses a ``--config`` file that is no YAML (naming it and the line), the flat keys of infgrpo 0.1
        (``model.loss_type``) naming where each moved, and TRL's names (the preflight's steps on the words), then
        parses; with ``--print_config`` the seeds left null are
        shown as the run's ``seed_everything`` they become."""
        argv = list(sys.argv[1:] if args is None else args) if not isinstance(args, dict | Namespace) else []
        try:  # the preflight's steps on the words: a file that is no YAML, 0.1's keys, TRL's names
            check_arguments(argv, {action.dest for action in parser._actions})
        except ConfigError as err:
            parser.error(str(err))
        printing = [a for a in argv if a == "--print_config" or a.startswith("--print_config=")]
        if not printing:
            return super().parse_arguments(parser, args)
        config = parser.parse_args([a for a in argv if a not in printing])
        resolve_seeds(config)
        flags = printing[-1].partition("=")[2]
        with warnings.catch_warnings():  # jsonargparse renames skip_none in 5.0; --print_config=skip_null means it
            warnings.simplefilter("ignore")
            print(parser.dump(config, skip_none="skip_null" in flags), end="")
        sys.exit(0)

    def before_instantiate_classes(self) -> None:
        """Fills the seeds left null with ``seed_everything``, then runs the preflight's steps on the parsed config
        before anything loads (:data:`~infgrpo.training.preflight.door.STEPS`), so a bad value ends the way a parser
        error does (one ``error:`` line naming ``model.<group>.<field>``, ``data.<field>`` or ``trainer.<flag>``);
        ``--ckpt_path last`` becomes the newest ``last.ckpt`` of the run's folder across its versions."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        resolve_seeds(config)
        try:  # the preflight's steps, in order (infgrpo.training.preflight.door.STEPS): any error is a bad setting
            check_command_line(config)
        except (ConfigError, ValueError, TypeError) as err:
            self.parser.error(str(err))
        note = no_checkpoint_note(config["trainer"], config["model"].get("output_dir"))
        if note:  # the run keeps no checkpoint: said before anything loads, not found out at its end
            rank_zero_only(print)(note, flush=True)

    def instantiate_trainer(self, **kwargs):  # noqa: ANN003, ANN201
        """The Trainer, with the default loggers when ``trainer.logger`` is unset or true, and atomic checkpoints.

        The checkpoint IO becomes :class:`AtomicCheckpointIO` only where it is Lightning's plain
        ``TorchCheckpointIO``; a custom one is kept.
        """
        config = self.config_init[self.subcommand] if self.subcommand else self.config_init
        if config["trainer"].get("logger") in (None, True):
            config["trainer"]["logger"] = default_loggers(config["trainer"].get("default_root_dir") or "runs")
        trainer = super().instantiate_trainer(**kwargs)
        for callback in trainer.callbacks:
            if type(callback) is RichProgressBar:  # same bar and settings, without "Epoch 0/-2"
                callback.__class__ = StepProgressBar
        if not any(isinstance(c, PlainProgress) for c in trainer.callbacks):
            trainer.callbacks.append(PlainProgress())  # prints only when stdout is not a terminal
        if not any(isinstance(c, Interruption) for c in trainer.callbacks):
            trainer.callbacks.append(Interruption())  # Ctrl-C / SIGTERM: a checkpoint at the step's end
        if trainer.checkpoint_callbacks and not any(isinstance(c, FinalCheckpoint) for c in trainer.callbacks):
            trainer.callbacks.append(FinalCheckpoint())  # the final step in last.ckpt, whatever the schedule
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer


USAGE = "python -m infgrpo.fit [-h] [-c CONFIG.yaml] [--print_config] [--SECTION.FIELD VALUE ...]"
DESCRIPTION = """\
Fine-tune a causal language model with GRPO (group relative policy optimization) on one device or
data-parallel ranks. Each optimization step samples model.group_size completions per prompt through
a KV slot pool of model.sampler.num_slots sequences, so rollout memory does not grow with the group
size; completions are scored by model.rewards.functions and the policy is updated with model.objective.

Every field below can be set in a YAML config (-c/--config, e.g. configs/tiny.yaml) and overridden
on the command line; later arguments win. Sections: --trainer.* (Lightning Trainer), --model.*
(policy, LoRA/4-bit loading, GRPO objective, rewards), --model.sampler.* (rollout decoding and
scheduling), --data.* (prompts).
"""
EPILOG = """\
examples:
  python -m infgrpo.fit -c configs/tiny.yaml                        # tiny model on CPU, ~2.5 min
  python -m infgrpo.fit -c configs/tiny.yaml --model.group_size 64 --trainer.max_steps 20
  python -m infgrpo.fit -c configs/qwen3.yaml                       # Qwen3-1.7B, LoRA + 4-bit, GSM8K
  python -m infgrpo.fit -c configs/qwen3.yaml --model.sampler.num_slots auto --model.sampler.rollout_memory 8GB
  python -m infgrpo.fit -c configs/tiny.yaml --ckpt_path runs/tiny/grpo/version_0/checkpoints/last.ckpt
  python -m infgrpo.fit -c configs/tiny.yaml --print_config         # the resolved configuration
"""


class HelpFormatter(DefaultHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """jsonargparse's help, with the description and examples kept as written (not re-wrapped)."""


def make_cli(args: list[str] | None = None) -> GRPOCLI:
    """The command line's parsed config, instantiated and not run: ``cli.model``, ``cli.datamodule`` and
    ``cli.trainer`` as ``python -m infgrpo.fit`` builds them from ``args`` (default: the command line), e.g. to
    validate before fitting (``benchmarks/vlm_learn.py``)."""
    return GRPOCLI(
        GRPOModule,
        PromptDataModule,
        run=False,
        args=args,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={
            "prog": "python -m infgrpo.fit",
            "usage": USAGE,
            "description": DESCRIPTION,
            "epilog": EPILOG,
            "formatter_class": HelpFormatter,
        },
        # GRPOModule builds its own AdamW + warmup from --model.optimizer.*
        auto_configure_optimizers=False,
        seed_everything_default=0,
        # the data module shards prompts over ranks itself (contiguous shares of each global batch)
        trainer_defaults={"num_sanity_val_steps": 0, "use_distributed_sampler": False},
    )


def main(args: list[str] | None = None) -> GRPOCLI | None:
    """Parses ``args`` (default: the command line) like ``python -m infgrpo.fit``, trains, and returns the CLI when
    given ``args`` (None from the command line: the console script ``infgrpo-fit`` exits with ``sys.exit(main())``,
    so its status is 0).

    ``cli.model``, ``cli.datamodule`` and ``cli.trainer`` are the trained objects, e.g.
    ``main(["--config", "configs/tiny.yaml", "--trainer.max_steps", "10"]).model.policy``. The last line says where
    the final step's checkpoint and ``model.output_dir`` went (:mod:`infgrpo.callbacks.final_checkpoint`). Exit
    status: 0 when the run ended; 2 on a bad setting (the parser's ``error:`` line), also one found once the model
    loaded (a checkpoint of another base model); 1 when ``model.output_dir`` could not be written at the end and the
    model went to the run's version folder instead (one ``error:`` line says where); 128 + the signal's number (130,
    143) when SIGINT or SIGTERM stopped it at a step boundary, after a checkpoint
    (:mod:`infgrpo.callbacks.interruption`; one line says where and how to resume).
    """
    cli = make_cli(args)
    try:
        cli.trainer.fit(cli.model, cli.datamodule, ckpt_path=cli.config.get("ckpt_path"))
    except ConfigError as err:  # a setting only the loaded model could judge: the parser's line, as before loading
        cli.parser.error(str(err))
    stopped = next((c for c in cli.trainer.callbacks if isinstance(c, Interruption) and c.signal), None)
    if cli.trainer.is_global_zero:
        words = sys.argv[1:] if args is None else args
        print(resume_line(stopped, words) if stopped else end_line(cli.trainer, cli.model), flush=True)
    if cli.model.output.rescued_to is not None:
        sys.exit(1)
    if stopped is not None:
        sys.exit(128 + stopped.signal)
    return cli if args is not None else None


def end_line(trainer: Any, module: GRPOModule) -> str:
    """The line a run that ended ends with: its last step, its checkpoint and ``model.output_dir``."""
    final = next((c for c in trainer.callbacks if isinstance(c, FinalCheckpoint)), None)
    why = "trainer.enable_checkpointing is false" if final is None else "no step was trained in this run"
    return final_line(trainer.global_step, final and final.path, module.output.path, module.output.what, why)


def resume_line(stopped: Interruption, argv: list[str]) -> str:
    """The line an interrupted run ends with: the signal, the step, the checkpoint and the command that resumes,
    quoted for a POSIX shell (:func:`shlex.join`: ``[t:add]`` is no glob, a value with a space stays one word)."""
    kept, skip = [], False
    for a in argv:  # the command as given, without its own --ckpt_path
        if skip or a.startswith("--ckpt_path"):
            skip = a == "--ckpt_path"
            continue
        kept.append(a)
    command = shlex.join(["python", "-m", "infgrpo.fit", *kept, "--ckpt_path", "last"])
    name = signal.Signals(stopped.signal).name
    return f"[infgrpo] stopped by {name} after step {stopped.step}: checkpoint {stopped.checkpoint}; resume: {command}"


if __name__ == "__main__":
    main()
