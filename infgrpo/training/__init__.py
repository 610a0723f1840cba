"""The glue of one GRPO step, without Lightning: settings and their cross-group rules, scoring, the judged rollout,
metrics, run state; :mod:`infgrpo.training.preflight` holds what runs before the model loads."""
