"""Engine: decodes many sequences over a fixed slot pool with continuous refill.

    engine = Engine(model, SamplerConfig(num_slots=16, max_new_tokens=256), stop_ids=[eos], pad_id=0)
    finished, stats = engine.run(prompts, group_size=64, seed=0)

One rollout reads schedule -> prefill -> decode -> postprocess, with no callbacks::

    while picks := sched.schedule():             # the refill policy fills the free slots, in rounds
        runner.prefill(sched.to_prefill(picks))  # the round's new prompts in one forward: every sample's first token
        ...                                      # one-token completions end here; the others start in their slots
    out = runner.decode()                        # one static forward + sampling over the whole pool, (S, 2)
    ended = sched.postprocess(out)               # append, stop, free slots (host bookkeeping only)
    runner.update(sched.running, ended)          # the next step's inputs

:class:`~infgrpo.sampler.scheduler.Scheduler` keeps the host side (who waits, who runs where, which
prompt K/V are still needed, the timeline; the trace simulator drives the same object), and
:class:`~infgrpo.sampler.model_runner.ModelRunner` the device side (prefill, the K/V copy into a
slot, the static :class:`~infgrpo.sampler.decode_step.DecodeStep`, a CUDA graph on CUDA). Each
prompt is prefilled **once** (batched with the other prompts admitted in the same round), its K/V
kept while some of its samples still wait and copied into every slot that runs one of them.
Micro sampling groups are the special case of a pool smaller than the group; groups of several
prompts interleave in the pool. Sequence j of prompt i samples its t-th token with the uniform of
(seed, prompt_offset + i, j, t) (:mod:`infgrpo.sampler.counter_rng`), so its tokens do not depend
on the slot, the neighbours or the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedModel

from infgrpo.sampler.config import SamplerConfig
from infgrpo.sampler.counter_rng import stream_key
from infgrpo.sampler.decode_step import StepSettings
from infgrpo.sampler.dynamic import DynamicResult, DynamicRun
from infgrpo.sampler.model_runner import ModelRunner
from infgrpo.sampler.pool_keeper import PoolKeeper
from infgrpo.sampler.refill import REFILL_POLICIES
from infgrpo.sampler.schedule_metrics import lower_bound_steps
from infgrpo.sampler.scheduler import Scheduler
from infgrpo.sampler.sequence import Sequence


@dataclass
class EngineStats:
    """Counters of one :meth:`Engine.run`: steps, prefills, busy slot-steps, K/V bytes, replans and the timeline."""

    num_slots: int = 0
    pool_positions: int = 0
    decode_steps: int = 0
    prefill_tokens: int = 0
    prefill_calls: int = 0
    busy_slot_steps: int = 0
    pool_bytes: int = 0
    prompt_kv_bytes_peak: int = 0
    replans: int = 0
    graph_captures: int = 0
    graph_fallback: str = ""
    """Why the decode step ran eagerly although CUDA graphs were on (a failed capture's reason), or ""."""
    timeline: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    """(slot, prompt_idx, sample_idx, start_step, end_step) of every sequence."""

    def to_stats(self, lengths: list[int]) -> dict[str, Any]:
        """The rollout's ``Rollouts.stats`` for completions of these ``lengths``: counters, slot utilization
        and its bubble, K/V bytes, and the decode steps against their lower bound (first tokens are free)."""
        steps = self.decode_steps
        utilization = self.busy_slot_steps / (self.num_slots * steps) if steps else 1.0
        bound = lower_bound_steps([max(n - 1, 0) for n in lengths], self.num_slots)
        return {
            "decode_steps": steps,
            "prefill_tokens": self.prefill_tokens,
            "generated_tokens": sum(lengths),
            "slot_utilization": utilization,
            "kv_bytes_peak": self.pool_bytes + self.prompt_kv_bytes_peak,
            "num_slots": self.num_slots,
            "pool_positions": self.pool_positions,
            "prefill_calls": self.prefill_calls,
            "graph_captures": self.graph_captures,
            "graph_fallback": self.graph_fallback,
            "timeline": self.timeline,
            "bubble_fraction": 1.0 - utilization,
            "lower_bound_steps": bound,
            "steps_over_lower_bound": steps / bound if bound else 1.0,
            "replans": self.replans,
        }


class Engine:
    """Slot-pool decoder for one HF causal LM, configured by a :class:`SamplerConfig`; see the module docstring.

    Args:
        model: the causal LM (plain, peft-wrapped or 4-bit).
        config: decoding settings (``num_slots`` must be an integer unless :meth:`run` is given one).
        stop_ids: the tokens that end a completion.
        pad_id: the token idle slots and prompt padding use.
        pools: keeps the slot pool and its decode step (CUDA graph) for the next run; without one,
            each engine keeps its own.

    Without predicted lengths, every refill policy serves the queue in prompt-major order, so the
    engine then runs ``fifo`` (the same decisions, no plan to make).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        config: SamplerConfig,
        *,
        stop_ids: list[int],
        pad_id: int,
        pools: PoolKeeper | None = None,
    ) -> None:
        self.model, self.config = model, config
        self.stop_ids = list(stop_ids)
        self.pools = pools if pools is not None else PoolKeeper()
        self.settings = StepSettings(
            config.temperature, config.top_k, config.top_p, pad_id, config.cuda_graphs, config.decode_attention,
            config.decode_width,
        )  # fmt: skip

    @torch.no_grad()
    def run(
        self,
        prompts: list[list[int]],
        group_size: int,
        seed: int,
        predicted_lengths: list[float] | None = None,
        prompt_offset: int = 0,
        num_slots: int | None = None,
    ) -> tuple[list[Sequence], EngineStats]:
        """Decodes ``group_size`` samples of each prompt; returns them prompt-major, and stats.

        ``predicted_lengths`` (one per prompt) order the work for the length-aware refill policies;
        ``prompt_offset`` is added to each prompt's index in its random stream's key (the global
        index of ``prompts[0]`` when a batch is split across ranks); ``num_slots`` overrides the
        config's (the sampler's pool sizing and out-of-memory back-off choose it).
        """
        cfg = self.config
        num_slots = cfg.num_slots if num_slots is None else num_slots
        if not isinstance(num_slots, int):
            raise ValueError(f"num_slots={num_slots!r}: Engine.run needs an integer (the sampler resolves 'auto')")
        # 1) every sequence, prompt-major, with its own random stream
        seqs = [
            Sequence(p, j, key=stream_key(seed, prompt_offset + p, j))
            for p in range(len(prompts))
            for j in range(group_size)
        ]
        if predicted_lengths is not None:
            for s in seqs:
                s.predicted_length = float(predicted_lengths[s.prompt_idx])
        groups = [seqs[i * group_size : (i + 1) * group_size] for i in range(len(prompts))]
        # 2) a pool no larger than the work, each slot long enough for any prompt + completion
        slots = min(num_slots, len(seqs))
        pool, step = self.pools.get(self.model, slots, max(map(len, prompts)) + cfg.max_new_tokens, self.settings)
        # 3) the host side (schedule) and the device side (prefill, decode step) of this rollout
        refill = cfg.refill if predicted_lengths is not None else "fifo"
        policy = REFILL_POLICIES.get(refill)(seqs, slots, planner=cfg.planner, epsilon=cfg.planner_epsilon)
        sched = Scheduler(policy, slots, group_size, cfg.max_new_tokens, self.stop_ids)
        runner = ModelRunner(self.model, pool, step, self.settings, prompts, groups)
        # 4) decode until every sequence finished
        self.admit(sched, runner)
        while sched.running:
            ended = sched.postprocess(runner.decode())
            runner.update(sched.running, ended)
            self.admit(sched, runner)
        stats = EngineStats(
            num_slots=slots,
            pool_positions=pool.max_len,
            decode_steps=sched.now,
            prefill_tokens=runner.prefill_tokens,
            prefill_calls=runner.prefill_calls,
            busy_slot_steps=sched.busy_slot_steps,
            pool_bytes=pool.nbytes(),
            prompt_kv_bytes_peak=runner.prompt_kv_bytes_peak,
            replans=getattr(policy, "replans", 0),
            graph_captures=step.captures,
            graph_fallback=step.fallback or "",
            timeline=sched.timeline,
        )
        return seqs, stats

    @torch.no_grad()
    def run_dynamic(self, run: DynamicRun) -> tuple[DynamicResult, EngineStats]:
        """Decodes a dynamic rollout (:mod:`infgrpo.sampler.dynamic`) built on this engine; returns its result and
        stats over every sequence decoded (kept, dropped and cancelled)."""
        result = run.run()
        sched, runner = run.sched, run.runner
        stats = EngineStats(
            num_slots=run.slots, pool_positions=run.pool.max_len, decode_steps=sched.now,
            prefill_tokens=runner.prefill_tokens, prefill_calls=runner.prefill_calls,
            busy_slot_steps=sched.busy_slot_steps, pool_bytes=run.pool.nbytes(),
            prompt_kv_bytes_peak=runner.prompt_kv_bytes_peak, replans=getattr(run.policy, "replans", 0),
            graph_captures=run.step.captures, graph_fallback=run.step.fallback or "", timeline=sched.timeline,
        )  # fmt: skip
        return result, stats

    @staticmethod
    def admit(sched: Scheduler, runner: ModelRunner) -> None:
        """Fills the free slots: admission rounds of the scheduler, each round's new prompts prefilled together.

        A sample that ends on its first token releases its prompt at once; the K/V of the others are
        copied into their slots once the admission is over, and released then.
        """
        started = []
        while picks := sched.schedule():
            runner.prefill(sched.to_prefill(picks))
            ends = [sched.append(seq, *runner.first_token(seq)) for _, seq in picks]
            started += sched.start(picks, ends)
            runner.keep(sched.release(seq for (_, seq), end in zip(picks, ends, strict=True) if end))
        for slot, seq in started:
            runner.load(slot, seq)
        runner.keep(sched.release(seq for _, seq in started))
