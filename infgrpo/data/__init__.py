"""Prompt data: the synthetic tiny task and a LightningDataModule over ``datasets``."""

from infgrpo.data.datamodule import PromptDataModule

__all__ = ["PromptDataModule"]
