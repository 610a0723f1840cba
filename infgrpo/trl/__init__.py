"""The TRL wing: TRL 1.16's GRPO settings read and turned into infgrpo's keys.

- :mod:`~infgrpo.trl.fields`: the field table (each TRL field to infgrpo's keys, or why it has none), with the
  reasons of :mod:`~infgrpo.trl.reasons`; :mod:`~infgrpo.trl.other_keys`: the keys of real config files that TRL
  1.16 lacks (older names, recipe scripts' arguments, launcher keys), in the same shape;
- :mod:`~infgrpo.trl.trl_settings`: TRL's defaults and the settings of one TRL config over them;
- :mod:`~infgrpo.trl.keys`: infgrpo's keys being written, with infgrpo's defaults;
- :mod:`~infgrpo.trl.transforms`: the functions for the fields whose values are not copied as they are, and
  :mod:`~infgrpo.trl.how`: one line of how each does it, for the table;
- :mod:`~infgrpo.trl.names`: TRL's names on ``python -m infgrpo.fit``'s command line, pointed to infgrpo's keys.

The command, ``python -m infgrpo.from_trl`` (:mod:`infgrpo.from_trl`), stands above and puts them together. The
wing imports nothing of the training (the module, the trainer, the preflight checks): the preflight reads it.
"""
