"""The shape of a transform, and the table that registers transforms under the TRL fields they convert.

A module of transforms makes its table, ``TRANSFORMS = Transforms()``, and registers each function above it:
``@TRANSFORMS.converts("max_completion_length")`` over ``def _max_new_tokens(trl, out, notes)``, which writes
``out.put("model.sampler.max_new_tokens", trl.integer("max_completion_length"), True)``.
"""

from __future__ import annotations

from collections.abc import Callable

from infgrpo.trl.keys import Keys
from infgrpo.trl.trl_settings import TrlSettings

Transform = Callable[[TrlSettings, Keys, list[str]], None]
"""Reads TRL's settings, writes infgrpo's keys (:meth:`~infgrpo.trl.keys.Keys.put`) and appends the notes worth
telling (each note one sentence: what TRL's value became, or why it was not carried over)."""


class Transforms(dict[str, Transform]):
    """TRL fields to the function that converts them, in the order the functions are defined."""

    def converts(self, *names: str) -> Callable[[Transform], Transform]:
        """Registers a transform for ``names`` (fields of :data:`~infgrpo.trl.fields.TRL_FIELDS` mapped to
        infgrpo keys)."""

        def deco(fn: Transform) -> Transform:
            for name in names:
                self[name] = fn
            return fn

        return deco
