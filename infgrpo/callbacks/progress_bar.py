"""The command line's progress bar: Lightning's rich bar without an epoch limit that is not there."""

from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar


class StepProgressBar(RichProgressBar):
    """Lightning's :class:`RichProgressBar`, titled ``Epoch N`` when training is bounded by steps.

    With ``max_steps`` set and no ``max_epochs``, Lightning sets ``max_epochs = -1`` and the stock bar
    reads "Epoch 0/-2"; this one leaves the bound out, as the tqdm bar does.
    """

    def _get_train_description(self, current_epoch: int) -> str:
        max_epochs = self.trainer.max_epochs
        if max_epochs is not None and max_epochs >= 0:
            return super()._get_train_description(current_epoch)
        description = f"Epoch {current_epoch}"
        return f"{description:{len(self.validation_description)}}"  # same padding as the stock bar
