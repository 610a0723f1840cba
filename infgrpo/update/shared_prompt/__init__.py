"""The shared-prompt update (``update.share_prompt``): each group's prompt runs once for the completions beside it.

    shared = resolve_share_prompt(model, "auto")          # check.py: on where exact, else off with one line why
    mbs = prepare_shared_microbatches(prompts, row_prompt, completions, token_budget, pad_id)   # batching.py
    h = shared_hidden(decoder, mb, carry)                 # forward.py: (n, C, H) with the prompt run once

- :mod:`~infgrpo.update.shared_prompt.batching`: :class:`~infgrpo.update.shared_prompt.batching.SharedMicroBatch`
  and the packer that keeps a group's completions together;
- :mod:`~infgrpo.update.shared_prompt.forward`: the two forwards (prompts, then completions that attend to them);
- :mod:`~infgrpo.update.shared_prompt.prefix_cache`: the differentiable prompt K/V those forwards pass;
- :mod:`~infgrpo.update.shared_prompt.carry`: a group split over micro-batches runs its prompt once in a pass;
- :mod:`~infgrpo.update.shared_prompt.check`: whether the shared path is exact for a model (the rules and a probe).
"""
