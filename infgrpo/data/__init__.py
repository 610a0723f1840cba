"""Prompt data: a LightningDataModule over ``datasets`` (and the shipped tiny task, ``path: tiny``)."""

from infgrpo.data.datamodule import PromptDataModule

__all__ = ["PromptDataModule"]
