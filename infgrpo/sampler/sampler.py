"""MicroGroupSampler: G completions per prompt in memory bounded by a pool of ``num_slots``.

    sampler = MicroGroupSampler(model, tokenizer, SamplerConfig(num_slots=8, max_new_tokens=128))
    rollouts = sampler.sample([[1, 5, 7, ...], ...], group_size=32, seed=0)

The sampler knows nothing of Lightning or rewards: token ids in, :class:`Rollouts` out.
"""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from infgrpo.runtime.ranks import Ranks
from infgrpo.runtime.threads import adapt_threads
from infgrpo.sampler.config import SamplerConfig
from infgrpo.sampler.engine import Engine
from infgrpo.sampler.hf_generate import GroupOutput, decode_group, generation_kwargs
from infgrpo.sampler.length_predictor import LengthPredictor, pool_over_ranks, prompt_features, prompt_key
from infgrpo.sampler.model_support import (
    check_engine_support,
    check_prompts,
    kv_bytes_per_token,
    sliding_window,
    stop_token_ids,
)
from infgrpo.sampler.pool_sizing import PoolSizer
from infgrpo.sampler.rollouts import Rollouts
from infgrpo.sampler.schedule_metrics import lower_bound_steps, prediction_errors
from infgrpo.sampler.slot_pool import PoolCache


class MicroGroupSampler:
    """Decodes groups of completions in micro-groups of ``config.num_slots`` sequences.

    Args:
        model: a Hugging Face causal LM (plain, peft-wrapped or quantized).
        tokenizer_or_eos: a tokenizer (its ``eos_token_id`` and ``pad_token_id`` are used) or the
            EOS token id itself.
        config: decoding settings; see :class:`SamplerConfig`.
        pad_id: the token idle slots and padding use (default: the tokenizer's pad token, else EOS).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer_or_eos: PreTrainedTokenizerBase | int,
        config: SamplerConfig,
        pad_id: int | None = None,
    ) -> None:
        check_engine_support(model)
        window = sliding_window(model)
        if window is not None and config.max_new_tokens >= window:
            raise ValueError(
                f"max_new_tokens={config.max_new_tokens} does not fit the model's sliding attention window "
                f"(sliding_window={window}): the slot-pool engine attends over whole sequences, which equals "
                f"windowed attention only below {window} positions (prompt included)"
            )
        self.model = model
        self.config = config
        if isinstance(tokenizer_or_eos, int):
            self.eos_id, pad = tokenizer_or_eos, None
        else:
            self.eos_id, pad = tokenizer_or_eos.eos_token_id, tokenizer_or_eos.pad_token_id
        pad = pad if pad_id is None else pad_id
        self.pad_id = self.eos_id if pad is None else pad
        self.stop_ids = stop_token_ids(model, self.eos_id, config.stop_token_ids)
        self.calls = 0
        self.last_stats: dict[str, Any] = {}
        # After a rollout ran out of device memory, the slot count that worked: later rollouts start
        # there instead of failing again (see _oom_backoff).
        self.slot_cap: int | None = None
        self.sizer = PoolSizer(
            config.num_slots, config.rollout_memory, config.max_new_tokens, config.top_k, config.top_p
        )
        # The KV slot pool and its decode step (CUDA graph), kept between rollouts (config.keep_pool).
        self.pools = PoolCache()
        self.predictor = (
            LengthPredictor(config.length_predictor, config.max_new_tokens)
            if config.length_predictor != "none"
            else None
        )

    # -- sampling ---------------------------------------------------------------------------
    @torch.no_grad()
    def sample(
        self,
        prompt_ids: list[list[int]],
        group_size: int,
        seed: int = 0,
        prompt_offset: int = 0,
        ranks: Ranks | None = None,
    ) -> Rollouts:
        """``group_size`` completions of each prompt, prompt-major (see :class:`Rollouts`).

        Sample j of ``prompt_ids[i]`` draws from the random stream (seed, prompt_offset + i, j):
        ``prompt_offset`` is the global index of ``prompt_ids[0]`` when a batch is split over ranks.
        ``ranks``: the data-parallel ranks sharing the batch; what the rollout teaches the length
        predictor is pooled over them, so every rank's predictor stays identical.
        """
        if group_size < 1:
            raise ValueError(f"group_size={group_size} must be >= 1")
        check_prompts(self.model, prompt_ids, self.config.max_new_tokens)
        adapt_threads(self.model, rows=len(prompt_ids) * group_size)  # CPU threads: work size, free cores
        cfg = self.config
        was_training = self.model.training
        self.model.eval()
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        try:
            if cfg.decoder == "engine":
                rollouts = self._oom_backoff(
                    lambda slots: self._sample_engine(
                        prompt_ids, group_size, seed, slots, learn=True, prompt_offset=prompt_offset, ranks=ranks
                    ),
                    self.sizer.slots(self.model, prompt_ids),
                    "model.sampler.num_slots",
                )
            else:
                rollouts = self._sample_hf(prompt_ids, group_size, seed, prompt_offset)
        finally:
            self.model.train(was_training)
            if not cfg.keep_pool:
                self.release()
        self.calls += 1
        self.last_stats = rollouts.stats  # the latest rollout's statistics (benchmarks read them after a step)
        rollouts.stats["wall_time_s"] = wall = time.perf_counter() - start
        rollouts.stats["tokens_per_s"] = rollouts.stats["generated_tokens"] / wall if wall > 0 else 0.0
        if torch.cuda.is_available():
            rollouts.stats["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
        return rollouts

    def release(self) -> None:
        """Frees the KV slot pool and its captured decode step now; the next rollout allocates them again."""
        self.pools.release()

    @torch.no_grad()
    def generate_one(self, prompt_ids: list[list[int]], batch_size: int = 128) -> Rollouts:
        """One completion per prompt, ``batch_size`` slots at once (evaluation, e.g. greedy)."""
        check_prompts(self.model, prompt_ids, self.config.max_new_tokens)
        was_training = self.model.training
        self.model.eval()
        try:
            return self._oom_backoff(
                lambda slots: self._sample_engine(prompt_ids, 1, 0, slots), batch_size, "data.eval_batch_size"
            )
        finally:
            self.model.train(was_training)
            if not self.config.keep_pool:
                self.release()

    def _oom_backoff(self, run: Callable[[int], Rollouts], slots: int, field: str) -> Rollouts:
        """``run(slots)``; when it runs out of device memory, again with half the slots, down to one.

        Completions do not depend on the slot count (one random stream per sequence), so a retry
        returns exactly what the first attempt would have. The count that worked is kept in
        ``slot_cap`` for later rollouts; ``stats["oom_retries"]`` counts the halvings of this call.
        ``field`` names the setting to lower in the warning and in the error raised when even one
        slot does not fit.
        """
        slots = min(slots, self.slot_cap) if self.slot_cap else slots
        retries = 0
        while True:
            try:
                rollouts = run(slots)
                break
            except torch.OutOfMemoryError as err:
                if slots == 1:
                    raise torch.OutOfMemoryError(
                        f"the rollout ran out of device memory even with one slot ({field}): the model and "
                        f"one sequence of up to max_new_tokens={self.config.max_new_tokens} tokens after its "
                        "prompt do not fit. Lower model.sampler.max_new_tokens or data.max_prompt_length, "
                        f"or load the model in 4-bit (model.load_in_4bit). Cause: {err}"
                    ) from None
                message = str(err).splitlines()[0] if str(err) else "out of memory"
            # outside the except block: the traceback's frames (and their tensors) are released
            self.pools.release()
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            smaller = max(1, slots // 2)
            warnings.warn(
                f"[infgrpo] the rollout ran out of device memory with {slots} slots ({message}); retrying with "
                f"{smaller}. Set {field} to {smaller} or less to skip this.",
                stacklevel=3,
            )
            slots = self.slot_cap = smaller
            retries += 1
        rollouts.stats["oom_retries"] = retries
        return rollouts

    def _sample_engine(
        self,
        prompt_ids: list[list[int]],
        group_size: int,
        seed: int,
        num_slots: int,
        learn: bool = False,
        prompt_offset: int = 0,
        ranks: Ranks | None = None,
    ) -> Rollouts:
        cfg = self.config
        # 1) predict each prompt's completion length (the length-aware refill policies order by it)
        predictor = self.predictor if learn else None
        preds, feats, keys, predict_time = None, None, [], 0.0
        if predictor is not None:
            start = time.perf_counter()
            keys = [prompt_key(p) for p in prompt_ids]
            feats = prompt_features(self.model, prompt_ids) if predictor.needs_features else None
            preds = predictor.predict(keys, feats)
            predict_time = time.perf_counter() - start
        engine = Engine(
            self.model,
            num_slots,
            cfg.max_new_tokens,
            self.stop_ids,
            self.pad_id,
            cfg.temperature,
            cfg.top_k,
            cfg.top_p,
            cfg.refill if learn else "fifo",
            cfg.planner,
            cfg.planner_epsilon,
            pools=self.pools,
            cuda_graphs=cfg.cuda_graphs,
            attention=cfg.decode_attention,
        )
        # 2) decode
        seqs, st = engine.run(prompt_ids, group_size, seed, preds, prompt_offset)
        rollouts = Rollouts(
            prompt_ids=[list(p) for p in prompt_ids],
            group_size=group_size,
            completion_ids=[s.token_ids for s in seqs],
            logprobs=[s.logprobs for s in seqs],
            finish_reasons=[s.finish_reason for s in seqs],
        )
        slots = min(num_slots, len(seqs))
        rollouts.stats = {
            "decode_steps": st.decode_steps,
            "prefill_tokens": st.prefill_tokens,
            "generated_tokens": sum(rollouts.lengths),
            "slot_utilization": st.busy_slot_steps / (slots * st.decode_steps) if st.decode_steps else 1.0,
            "kv_bytes_peak": st.pool_bytes + st.prompt_kv_bytes_peak,
            "num_slots": slots,
            "pool_positions": engine.pools.pool.max_len if engine.pools.pool is not None else 0,
            "prefill_calls": st.prefill_calls,
            "graph_captures": st.graph_captures,
            "timeline": st.timeline,
        }
        # 3) schedule telemetry, and the predictor learns from what the policy actually generated
        steps = st.decode_steps
        rollouts.stats["bubble_fraction"] = 1.0 - rollouts.stats["slot_utilization"]
        rollouts.stats["lower_bound_steps"] = bound = lower_bound_steps(
            [max(n - 1, 0) for n in rollouts.lengths], slots
        )
        rollouts.stats["steps_over_lower_bound"] = steps / bound if bound else 1.0
        rollouts.stats["replans"] = st.replans
        if predictor is not None:
            per_seq = [preds[i // group_size] for i in range(len(seqs))]
            rollouts.stats["predicted_lengths"] = per_seq
            rollouts.stats.update(prediction_errors(per_seq, rollouts.lengths))
            lengths = rollouts.lengths
            # every data-parallel rank learns the pooled update, so their predictors stay identical
            predictor.sync = pool_over_ranks(ranks.gather) if ranks is not None and ranks.world_size > 1 else None
            predictor.update(keys, feats, [lengths[i : i + group_size] for i in range(0, len(lengths), group_size)])
            rollouts.stats["predict_time_s"] = predict_time
        return rollouts

    def _sample_hf(self, prompt_ids: list[list[int]], group_size: int, seed: int, prompt_offset: int = 0) -> Rollouts:
        cfg = self.config
        kw = generation_kwargs(cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p, self.stop_ids, self.pad_id)
        slots = group_size if cfg.decoder == "hf_full" else self.sizer.slots(self.model, prompt_ids)
        groups: list[GroupOutput] = [
            decode_group(
                self.model,
                p,
                group_size,
                slots,
                seed,
                prompt_offset + i,
                kw,
                prefill_once=cfg.decoder == "micro_groups",
            )
            for i, p in enumerate(prompt_ids)
        ]
        rollouts = Rollouts(
            prompt_ids=[list(p) for p in prompt_ids],
            group_size=group_size,
            completion_ids=[c for g in groups for c in g.completion_ids],
            logprobs=[lp for g in groups for lp in g.logprobs],
            finish_reasons=[r for g in groups for r in g.finish_reasons],
        )
        slot_steps = sum(g.slot_steps for g in groups)
        rollouts.stats = {
            "decode_steps": sum(g.decode_steps for g in groups),
            "prefill_tokens": sum(g.prefill_tokens for g in groups),
            "generated_tokens": sum(rollouts.lengths),
            "slot_utilization": sum(rollouts.lengths) / slot_steps if slot_steps else 1.0,
            "kv_bytes_peak": max(g.peak_tokens_held for g in groups) * kv_bytes_per_token(self.model),
            "num_slots": min(slots, group_size),
        }
        return rollouts

    # -- checkpointing ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Checkpoint state: the number of calls (it seeds the next rollout), the config, and the length predictor's."""
        state = {"calls": self.calls, "config": asdict(self.config)}
        if self.predictor is not None:
            state["predictor"] = self.predictor.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores the call count and, when both have one, the length predictor; the saved config is not applied."""
        self.calls = int(state["calls"])
        if self.predictor is not None and "predictor" in state:
            self.predictor.load_state_dict(state["predictor"])
