"""The transforms: a function for each TRL setting whose value is not copied as it is to its one infgrpo key.

    TRANSFORMS["num_train_epochs"]      # run._run_length: max_steps > 0 wins, else whole epochs

A new one is a function ``(trl, out, notes) -> None`` (:data:`~infgrpo.trl.transforms.registry.Transform`) in
:mod:`~infgrpo.trl.transforms.model` (the model's settings), :mod:`~infgrpo.trl.transforms.run` (the run around
it) or :mod:`~infgrpo.trl.transforms.data` (the data), registered with ``@TRANSFORMS.converts("field", ...)``; its
fields' rows in
:data:`~infgrpo.trl.fields.FIELD_GROUPS` name the keys it writes, and :data:`~infgrpo.trl.how.HOW` says how.
"""

from infgrpo.trl.transforms import data, model, run
from infgrpo.trl.transforms.registry import Transform

TRANSFORMS: dict[str, Transform] = {**model.TRANSFORMS, **run.TRANSFORMS, **data.TRANSFORMS}
"""The mapped fields whose values are not copied as they are, to the function that converts them (each runs once:
the model's transforms, then the run's, then the data's, each in the order they are defined); every other mapped
field is copied to its one key."""
