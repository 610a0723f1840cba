"""Train with GRPO from the command line, on LightningCLI.

    python -m infgrpo.fit --config configs/tiny.yaml
    python -m infgrpo.fit --config configs/tiny.yaml --model.group_size 16 --trainer.max_steps 50
    python -m infgrpo.fit --config configs/tiny.yaml --ckpt_path runs/tiny/version_0/checkpoints/last.ckpt
    python -m infgrpo.fit --help

Logs go to CSV (and TensorBoard when installed) under ``trainer.default_root_dir``; each run gets a
new version folder, with its checkpoints (written atomically) inside.
"""

from __future__ import annotations

import importlib.util
import os

from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.plugins.io import TorchCheckpointIO

from infgrpo.checkpoint_io import AtomicCheckpointIO
from infgrpo.data import PromptDataModule
from infgrpo.module import GRPOModule

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def default_loggers(root: str = "runs") -> list[dict]:
    loggers = [{"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": root, "name": "grpo"}}]
    if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
        loggers.append(
            {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": root, "name": "grpo"}}
        )
    return loggers


class GRPOCLI(LightningCLI):
    """LightningCLI for GRPO: model and data linked, ``--ckpt_path`` to resume, atomic checkpoints."""

    def add_arguments_to_parser(self, parser) -> None:  # noqa: ANN001 - jsonargparse parser
        parser.link_arguments("model.model", "data.tokenizer")
        parser.add_argument("--ckpt_path", type=str | None, default=None, help="checkpoint to resume from")

    def instantiate_trainer(self, **kwargs):  # noqa: ANN003, ANN201
        trainer = super().instantiate_trainer(**kwargs)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer


def main(args: list[str] | None = None) -> GRPOCLI:
    cli = GRPOCLI(
        GRPOModule,
        PromptDataModule,
        run=False,
        args=args,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={"logger": default_loggers(), "num_sanity_val_steps": 0},
    )
    cli.trainer.fit(cli.model, cli.datamodule, ckpt_path=cli.config.get("ckpt_path"))
    return cli


if __name__ == "__main__":
    main()
