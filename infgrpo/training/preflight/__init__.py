"""Checks that run before the model loads, so that a bad setting costs one line, not a loaded model and a traceback.

The order is code: :data:`~infgrpo.training.preflight.door.STEPS`, one :class:`~infgrpo.training.preflight.door.Step`
per check, each naming what it reads and how the two doors run it. The command line calls
:func:`~infgrpo.training.preflight.door.check_arguments` on its words and
:func:`~infgrpo.training.preflight.door.check_command_line` on the parsed config (both from :mod:`infgrpo.fit`);
the Python API calls :func:`~infgrpo.training.preflight.door.check_fit_start` from ``GRPOModule.on_fit_start``,
before the first step. A step one door cannot run says there why, and where that door meets the rule instead. A
new check is one ``Step`` in ``STEPS``; its rule goes in the module of what it reads (trainer flags:
:mod:`~infgrpo.training.preflight.trainer_check`; ``--ckpt_path``: :mod:`~infgrpo.training.preflight.checkpoints`
and :mod:`~infgrpo.training.preflight.resume_check`; folders and config files:
:mod:`~infgrpo.training.preflight.files`; the model's config and the data's first rows:
:mod:`~infgrpo.training.preflight.model_data` and :mod:`~infgrpo.training.preflight.data_check`; what fit start
reads: :mod:`~infgrpo.training.preflight.fit_start`; settings that do nothing:
:mod:`~infgrpo.training.preflight.no_effect`). Each reads settings, files or a model's config, never the
weights; a setting's check by itself belongs to its group (:func:`~infgrpo.training.hparams.check_settings`).
"""
