"""The device side of a rollout: one decode loop over a KV slot pool, fed by a feed.

``engine.py`` (the loop: schedule -> prefill -> decode -> postprocess), ``feed.py`` (what enters the pool: the fixed
batch) and ``dynamic.py`` (draw-and-judge, verl's rounds), ``adaptive.py`` (groups that grow: a component of those
feeds) with ``rescue_rates.py`` (its prior), ``plan.py`` (what a feed is made from: the plan and the specs, pure
data that imports no feed) and ``summaries.py`` (what a rollout found), ``model_runner.py`` (prefill, K/V copy, the
step), ``decode_step.py`` (the static step, a CUDA graph on CUDA: ``graph_capture.py``), ``slot_pool.py`` and
``pool_keeper.py`` (the K/V pool and who keeps it), ``prefill.py``, ``sampling.py``, ``counter_rng.py`` (random
streams keyed by seed, prompt, sample and token). It imports the host side (:mod:`infgrpo.sampler.schedule`), never
the other way round.
"""
