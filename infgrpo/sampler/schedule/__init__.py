"""The host side of a rollout: who waits, who runs where, in which order -- no device work, nothing of the engine.

``scheduler.py`` (the running map, free slots, prompt K/V references, the timeline), ``sequence.py``,
``refill.py`` (fifo, sjf, lpt, planned), ``planner.py`` (the global assignment with its guarantee),
``length_predictor.py`` (learned online from the policy's rollouts), ``simulate.py`` (the trace simulator: it
drives the same :class:`~infgrpo.sampler.schedule.scheduler.Scheduler` as the engine, so it makes the engine's
decisions exactly) and ``schedule_metrics.py``. Imports nothing of :mod:`infgrpo.sampler.engine` or torch models.
"""
