"""Engine: decodes many sequences over a fixed slot pool with continuous refill, in one loop that a feed drives.

    engine = Engine(model, SamplerConfig(num_slots=16, max_new_tokens=256), stop_ids=[eos], pad_id=0)
    feed = FixedBatch(prompts, group_size=64, seed=0)
    stats = engine.run(feed)                     # feed.groups: the completions, by prompt

One rollout reads schedule -> prefill -> decode -> postprocess, whatever decides what enters the pool::

    while not feed.done():
        feed.top_up(); admitted = admit()        # the feed queues work; the free slots are filled
        if not sched.running: ...                # stop unless admitted (all ended on their first token): top up again
        out = runner.decode()                    # one static forward + sampling over the whole pool, (S, 2)
        ended = sched.postprocess(out)           # append, stop, free slots (host bookkeeping only): (slot, seq)
        runner.update(sched.running, ended)      # the next step's inputs
        feed.ended(...)                          # the sequences that ended: a group may end, be judged, extend

    admit():                                     # in rounds, while the refill policy fills free slots
        picks = sched.schedule()
        runner.prefill(sched.to_prefill(picks))  # the round's new prompts in one forward: every sample's first token
        ...                                      # one-token completions end here; the others start in their slots

A **feed** (:mod:`infgrpo.sampler.engine.feed`) is what varies between rollouts: the fixed batch (these prompts x G,
``MicroGroupSampler.sample``), draw-and-judge (dynamic sampling: prompts drawn as slots free up, each group
judged when it ends) and verl's rounds (:mod:`infgrpo.sampler.engine.dynamic`). The loop consults it at admission
(:meth:`~infgrpo.sampler.engine.feed.Feed.top_up`: queue more sequences into the refill policy) and when sequences
end (:meth:`~infgrpo.sampler.engine.feed.Feed.ended`, which calls ``group_ended(i)`` when a group's last queued sample
ends); :meth:`~infgrpo.sampler.engine.feed.Feed.done` says when to stop (what still runs is cancelled). A feed that
asks for more samples of a prompt whose group ended without a reward spread queues them in ``group_ended``
(``feed.add_samples(i, k)``: sample indices continue, so each keeps its own stream) and the loop is unchanged.
No feed decodes.

:class:`~infgrpo.sampler.schedule.scheduler.Scheduler` keeps the host side (who waits, who runs where, which
prompt K/V are still needed, the timeline; the trace simulator drives the same object), and
:class:`~infgrpo.sampler.engine.model_runner.ModelRunner` the device side (prefill, the K/V copy into a
slot, the static :class:`~infgrpo.sampler.engine.decode_step.DecodeStep`, a CUDA graph on CUDA). Each
prompt is prefilled **once** (batched with the other prompts admitted in the same round), its K/V
kept while some of its samples still wait and copied into every slot that runs one of them.
Micro sampling groups are the special case of a pool smaller than the group; groups of several
prompts interleave in the pool. Sequence j of prompt i samples its t-th token with the uniform of
(seed, prompt_offset + i, j, t) (:mod:`infgrpo.sampler.engine.counter_rng`), so its tokens do not depend
on the slot, the neighbours or the schedule.

With ``turns`` (:mod:`infgrpo.sampler.engine.turns`: tools, environments), a sample whose turn ends on a stop token
may leave the pool to wait on its tools, without a barrier: its slot is refilled at once, the loop collects the
finished waits before each admission and resumes those samples ahead of new work (each re-prefilled into a free
slot, its stream's counter ``t`` counting model tokens only), and blocks on a tool only when nothing else can run::

    while not feed.done():
        resume(wait.ready())                     # TRL's rollback rule, else append the suffix and queue the sample
        feed.top_up(); admit()                   # resumed samples first: prompt + tokens so far in one prefill
        if not sched.running: resume(wait.wait_first()) ...
        ...; feed.ended(offer(ended))            # a turn that ended on a stop token: turns.turn_ended -> wait;
                                                 # a sample that finished: turns.ended records it first
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedModel

from infgrpo.sampler.engine.decode_step import StepSettings
from infgrpo.sampler.engine.feed import Feed
from infgrpo.sampler.engine.finite import check_logprobs
from infgrpo.sampler.engine.model_runner import ModelRunner
from infgrpo.sampler.engine.pool_keeper import PoolKeeper
from infgrpo.sampler.engine.summaries import ToolSummary
from infgrpo.sampler.engine.turns import Tools, Turns, context
from infgrpo.sampler.schedule.refill import REFILL_POLICIES
from infgrpo.sampler.schedule.schedule_metrics import lower_bound_steps
from infgrpo.sampler.schedule.scheduler import Scheduler
from infgrpo.vision.families import banned_token_ids, is_vision_config
from infgrpo.vision.inputs import VisionInputs

if TYPE_CHECKING:  # the facade's settings: read here, never imported at run time (imports run facade -> engine)
    from infgrpo.sampler.config import SamplerConfig


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
    """(slot, prompt_idx, sample_idx, start_step, end_step) of every sequence (with turns: of every turn)."""
    tools: ToolSummary | None = None
    """With ``turns``: what the tools did (``Rollouts.tools``)."""

    def to_stats(self, lengths: list[int]) -> dict[str, Any]:
        """The rollout's ``Rollouts.stats`` for completions of these ``lengths`` (the tokens the model generated: with
        turns, tool results are not counted): counters, slot utilization and its bubble, K/V bytes and the decode
        steps against their lower bound (first tokens are free)."""
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
        banned = tuple(banned_token_ids(model.config)) if is_vision_config(model.config) else ()  # image placeholders
        self.settings = StepSettings(
            config.temperature, config.top_k, config.top_p, pad_id, config.cuda_graphs, config.decode_attention,
            config.decode_width, banned,
        )  # fmt: skip

    @torch.no_grad()
    def run(
        self,
        feed: Feed,
        num_slots: int | None = None,
        turns: Turns | None = None,
        vision: list[VisionInputs | None] | None = None,
    ) -> EngineStats:
        """Decodes what ``feed`` queues until it is done or nothing is left to run; returns the stats of every
        sequence decoded (the completions stay in ``feed.groups``).

        ``num_slots`` overrides the config's (the sampler's pool sizing and out-of-memory back-off choose it).
        ``turns``: multi-turn samples (see the module docstring); each turn that ends on a stop token is offered
        to it. ``vision``: each prompt's images, by prompt index (a vision-language model; None: text prompts): a
        prompt's images go through the vision tower in its one prefill
        (:class:`~infgrpo.sampler.engine.model_runner.ModelRunner`).
        """
        cfg = self.config
        num_slots = cfg.num_slots if num_slots is None else num_slots
        if not isinstance(num_slots, int):
            raise ValueError(f"num_slots={num_slots!r}: Engine.run needs an integer (the sampler resolves 'auto')")
        # 1) a pool no larger than the work, each slot long enough for any prompt + completion
        slots = min(num_slots, feed.max_sequences)
        pool, step = self.pools.get(self.model, slots, feed.max_prompt_len + cfg.max_new_tokens, self.settings)
        # 2) the host side (schedule) and the device side (prefill, decode step) of this rollout
        refill = cfg.refill if feed.predicted else "fifo"
        policy = REFILL_POLICIES.get(refill)(feed.initial(), slots, planner=cfg.planner, epsilon=cfg.planner_epsilon)
        sched = Scheduler(policy, slots, feed.group_size, cfg.max_new_tokens, self.stop_ids, feed.waiting)
        runner = ModelRunner(self.model, pool, step, self.settings, feed.prompts, feed.groups, vision)
        feed.bind(sched)
        tools = (
            None
            if turns is None
            else Tools(turns, sched, feed, cfg.max_new_tokens, context(self.model), runner.park, runner.unpark)
        )
        sched.multi_turn = tools is not None
        # 3) decode until the feed is done, or nothing runs and nothing more can be admitted
        while not feed.done():
            if tools is not None:
                tools.resume(tools.wait.ready())  # the tools done by now: their samples queue ahead of new work
            feed.top_up()
            admitted = self.admit(sched, runner, feed, tools)
            if not sched.running:  # all admitted ended on their first token (the feed may queue more), or none was
                if admitted:
                    continue
                if tools is not None and tools.wait:  # nothing runs, nothing can be admitted: wait for a tool
                    tools.resume(tools.wait.wait_first())
                    continue
                break
            if feed.done():
                break
            out = runner.decode()  # (S, 2) host array: tokens, log-probs
            check_logprobs(out[list(sched.running), 1], f"decode step {sched.now + 1}")  # NaN logits; no sync
            ended = sched.postprocess(out)  # (slot, sequence) of each that ended
            runner.update(sched.running, [slot for slot, _ in ended])
            if tools is None:
                feed.ended([seq for _, seq in ended])
            else:
                tools.wait.stepped()
                feed.ended(tools.offer([seq for _, seq in ended]))
        return EngineStats(
            num_slots=slots, pool_positions=pool.max_len, decode_steps=sched.now,
            prefill_tokens=runner.prefill_tokens, prefill_calls=runner.prefill_calls,
            busy_slot_steps=sched.busy_slot_steps, pool_bytes=pool.nbytes(),
            prompt_kv_bytes_peak=runner.prompt_kv_bytes_peak, replans=getattr(policy, "replans", 0),
            graph_captures=step.captures, graph_fallback=step.fallback or "", timeline=sched.timeline,
            tools=None if tools is None else tools.summary(),
        )  # fmt: skip

    @staticmethod
    def admit(sched: Scheduler, runner: ModelRunner, feed: Feed, tools: Tools | None = None) -> int:
        """Fills the free slots: admission rounds of the scheduler, each round's new prompts prefilled together
        (and its resumed samples, with ``tools``, in one more forward).
        Returns the number of sequences admitted (0: nothing was queued, or no slot was free).

        A sample that ends on its first token releases its prompt at once (and the feed hears of it, or with
        ``tools``, first the turns); the K/V of the others are copied into their slots once the admission is
        over, and released then.
        """
        started, admitted = [], 0
        while picks := sched.schedule():
            admitted += len(picks)
            runner.prefill(sched.to_prefill(picks))
            if tools is not None:
                runner.resume([seq for _, seq in picks if seq.turns])
            ends = [sched.append(seq, *runner.first_token(seq)) for _, seq in picks]
            started += sched.start(picks, ends)
            done = [seq for (_, seq), end in zip(picks, ends, strict=True) if end]
            finished = done if tools is None else tools.offer(done)  # a leaving sample's K/V parked first
            runner.keep(sched.release(done), sched.live)
            if tools is not None:
                runner.drop_resumed(done)  # a slot refilled in this admission holds one re-prefilled sample at most
            feed.ended(finished)
        for slot, seq in started:
            runner.load(slot, seq)
        runner.keep(sched.release(seq for _, seq in started), sched.live)
        if tools is not None:
            runner.drop_resumed()
        return admitted
