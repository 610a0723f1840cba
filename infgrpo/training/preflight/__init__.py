"""Checks that run before the model loads, so that a bad setting costs one line, not a loaded model and a traceback.

Most run in the command line (``GRPOCLI.before_instantiate_classes`` in :mod:`infgrpo.fit`), in this order: the
TRL names and the ``--config`` files before parsing (:mod:`~infgrpo.trl.names`,
:mod:`~infgrpo.training.preflight.files`), the trainer's flags
(:mod:`~infgrpo.training.preflight.trainer_check`), ``--ckpt_path`` and the resume
(:mod:`~infgrpo.training.preflight.checkpoints`, :mod:`~infgrpo.training.preflight.resume_check`), the run's
folders, the model's config and the data's first rows (:mod:`~infgrpo.training.preflight.model_data`,
:mod:`~infgrpo.training.preflight.data_check`), and the warnings for settings that do nothing
(:mod:`~infgrpo.training.preflight.no_effect`). The Python API runs what it can when fit starts, before the first
step (:mod:`~infgrpo.training.preflight.fit_start`). Each reads settings, files or a model's config, never the
weights; the settings' own checks are :func:`~infgrpo.training.hparams.check_settings`'s.
"""
