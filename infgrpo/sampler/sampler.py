"""MicroGroupSampler: G completions per prompt in memory bounded by a pool of ``num_slots``.

    sampler = MicroGroupSampler(model, tokenizer, SamplerConfig(num_slots=8, max_new_tokens=128))
    rollouts = sampler.sample([[1, 5, 7, ...], ...], group_size=32, seed=0)

A facade: it predicts each prompt's completion length, decodes on the slot-pool engine (halving
the slots when the device runs out of memory) or on an HF baseline, teaches the length predictor
what the policy generated, and returns :class:`Rollouts`. The sampler knows nothing of Lightning or
rewards: token ids in, :class:`Rollouts` out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any, TypeVar

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from infgrpo.runtime.oom import first_line, retry_on_oom
from infgrpo.runtime.ranks import Ranks
from infgrpo.runtime.threads import adapt_threads
from infgrpo.sampler.config import SamplerConfig
from infgrpo.sampler.engine.adaptive import check_grow_scheme
from infgrpo.sampler.engine.dynamic import InformativeRate, PromptTooLong
from infgrpo.sampler.engine.engine import Engine, EngineStats
from infgrpo.sampler.engine.feed import Feed, FixedBatch
from infgrpo.sampler.engine.plan import AdaptiveSpec, DynamicSpec, FeedPlan, Replay
from infgrpo.sampler.engine.pool_keeper import PoolKeeper
from infgrpo.sampler.engine.rescue_rates import RescueRates
from infgrpo.sampler.engine.turns import Turns
from infgrpo.sampler.feeds import make_feed
from infgrpo.sampler.hf.baselines import BASELINES, generation_kwargs
from infgrpo.sampler.hf.request import DecodeRequest
from infgrpo.sampler.model_support import check_engine_support, check_prompts, kv_bytes_per_token, stop_token_ids
from infgrpo.sampler.pool_sizing import PoolSizer
from infgrpo.sampler.rollouts import Rollouts
from infgrpo.sampler.schedule.length_predictor import LengthPredictor, Looks, pool_over_ranks
from infgrpo.sampler.schedule.schedule_metrics import prediction_stats
from infgrpo.sampler.stop_tokens import check_stop_token_ids, model_vocab_size
from infgrpo.settings import InfgrpoWarning
from infgrpo.vision.checks import check_decoder
from infgrpo.vision.inputs import VisionInputs

T = TypeVar("T")


def check_sample_prompts(sample_prompts: list[list[list[int]]], rows: int, group_size: int, adaptive: bool) -> None:
    """A ValueError unless ``sample_prompts`` holds ``group_size`` prompts for each of ``rows`` rows, without adaptive
    groups (which extend a prompt's group)."""
    if len(sample_prompts) != rows or any(len(row) != group_size for row in sample_prompts):
        raise ValueError(f"sample_prompts needs {rows} rows of group_size={group_size} prompts each")
    if adaptive:
        raise ValueError(
            "adaptive groups decode a row's samples from one prompt: samples of one row with different prompts "
            "(environments' observations) need adaptive groups off"
        )


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
        check_engine_support(model, config.max_new_tokens)
        check_decoder(model.config, config.decoder)  # a vision-language model decodes on the engine only
        self.model, self.config = model, config
        if isinstance(tokenizer_or_eos, int):
            self.eos_id, pad = tokenizer_or_eos, None
        else:
            self.eos_id, pad = tokenizer_or_eos.eos_token_id, tokenizer_or_eos.pad_token_id
        pad = pad if pad_id is None else pad_id
        self.pad_id = self.eos_id if pad is None else pad
        check_stop_token_ids(config.stop_token_ids, model_vocab_size(model))  # a ConfigError naming the ids
        self.stop_ids = stop_token_ids(model, self.eos_id, config.stop_token_ids)
        self.calls = 0
        # After a rollout ran out of device memory, the slot count that worked: later rollouts start there.
        self.slot_cap: int | None = None
        self.sizer = PoolSizer(
            config.num_slots, config.rollout_memory, config.max_new_tokens, config.top_k, config.top_p
        )
        self.pools = PoolKeeper()  # the KV slot pool and its decode step (CUDA graph), kept between rollouts
        self.engine = Engine(model, config, stop_ids=self.stop_ids, pad_id=self.pad_id, pools=self.pools)
        self.predictor = (
            LengthPredictor(config.length_predictor, config.max_new_tokens)
            if config.length_predictor != "none"
            else None
        )
        self.rate = InformativeRate()  # dynamic sampling: the share of groups kept, observed over rollouts
        self.rescue = RescueRates()  # adaptive groups: how often an extension found a spread, per reward level

    def disable_cuda_graphs(self) -> None:
        """Decodes without CUDA graphs from now on: a sharded policy's weights are gathered anew for each rollout, at
        addresses a captured graph would not follow."""
        self.config = dataclasses.replace(self.config, cuda_graphs="off")
        self.engine = Engine(self.model, self.config, stop_ids=self.stop_ids, pad_id=self.pad_id, pools=self.pools)

    # -- sampling ---------------------------------------------------------------------------

    def sample(
        self,
        prompt_ids: list[list[int]],
        group_size: int,
        seed: int = 0,
        prompt_offset: int = 0,
        ranks: Ranks | None = None,
        adaptive: AdaptiveSpec | None = None,
        turns: Callable[[], Turns] | None = None,
        vision: list[VisionInputs | None] | None = None,
        sample_prompts: list[list[list[int]]] | None = None,
    ) -> Rollouts:
        """``group_size`` completions of each prompt, prompt-major (see :class:`Rollouts`).

        Sample j of ``prompt_ids[i]`` draws from the random stream (seed, prompt_offset + i, j):
        ``prompt_offset`` is the global index of ``prompt_ids[0]`` when a batch is split over ranks.
        ``ranks``: the data-parallel ranks sharing the batch; what the rollout teaches the length
        predictor is pooled over them, so every rank's predictor stays identical. ``adaptive``: groups
        without a reward spread grow (:mod:`infgrpo.sampler.engine.adaptive`); each prompt still returns
        ``group_size`` completions, the ones ``adaptive.judge.select`` picks (``Rollouts.sample_ids``), with
        ``Rollouts.adaptive`` and ``adaptive/*`` statistics. ``turns``: multi-turn samples (tools,
        :mod:`infgrpo.sampler.engine.turns`), a factory called once per engine run (an attempt that ran out of
        memory starts again with a fresh one); the rollouts then carry ``tool_masks``, what the turns recorded of
        each sample (``exchanges``) and what the tools did (``tools``, a
        :class:`~infgrpo.sampler.engine.summaries.ToolSummary`). ``sample_prompts``: sample j of row i decodes
        ``sample_prompts[i][j]`` (environments' observations; ``prompt_ids[i]`` is then its first sample's), each
        distinct prompt of a row prefilled once, the row still the group (:mod:`infgrpo.sampler.engine.per_sample`;
        ``Rollouts.entry_prompts``); the engine's fixed batch only. ``vision``: each prompt's images (a
        vision-language model; :class:`~infgrpo.vision.inputs.VisionInputs` or None per prompt): encoded and prefilled
        once per prompt, whatever ``group_size``; the rollouts carry them for the update (``Rollouts.vision``). Not
        with ``sample_prompts`` (an image prompt's environments must agree: ``AgentRollout.one_image_prompt``).
        """
        if group_size < 1:
            raise ValueError(f"group_size={group_size} must be >= 1")
        check_prompts(self.model, prompt_ids, self.config.max_new_tokens, vision)
        if sample_prompts is not None:
            if vision is not None:
                raise ValueError("sample_prompts (environments' observations) and vision (image prompts) together")
            check_sample_prompts(sample_prompts, len(prompt_ids), group_size, adaptive is not None)
            self.config.require_engine("agent")  # environments give them
            check_prompts(self.model, [p for row in sample_prompts for p in row], self.config.max_new_tokens)
        adapt_threads(self.model, rows=len(prompt_ids) * group_size)  # CPU threads: work size, free cores
        start = self._start()
        with self._decoding():
            if self.config.decoder != "engine":
                if adaptive is not None:
                    self.config.require_engine("adaptive_groups")
                if turns is not None:
                    self.config.require_engine("agent")
                rollouts = self._baseline(prompt_ids, group_size, seed, prompt_offset)
            else:
                plan = FeedPlan(group_size, seed, prompt_offset, prompts=prompt_ids, adaptive=adaptive, vision=vision)
                plan.sample_prompts = sample_prompts
                every = prompt_ids if sample_prompts is None else [p for row in sample_prompts for p in row]
                rollouts = self._on_engine(plan, self.sizer.slots(self.model, every), ranks, turns)
        rollouts.vision = vision  # the update encodes each prompt's images once per forward pass too
        return self._finish(rollouts, start)

    def sample_dynamic(
        self,
        source: Iterator[list[int]],
        group_size: int,
        seed: int,
        spec: DynamicSpec,
        max_prompt_len: int,
        prompt_offset: int = 0,
        ranks: Ranks | None = None,
        adaptive: AdaptiveSpec | None = None,
        turns: Callable[[], Turns] | None = None,
        vision: list[VisionInputs | None] | None = None,
    ) -> Rollouts:
        """Dynamic sampling (:mod:`infgrpo.sampler.engine.dynamic`): prompts drawn from ``source`` as the pool needs
        work, each finished group judged by ``spec.keep``, until ``spec.target_groups`` informative groups are
        found or ``spec.max_prompts`` are drawn. Returns the groups the step trains on (``Rollouts.drawn``: their
        positions in the draw order; ``Rollouts.dynamic``: what was found) with ``dynamic/*`` statistics;
        ``max_prompt_len`` is the pool's width: a drawn prompt longer than it (an environment's observation) widens
        the pool to its length and the rollout is decoded again, the same draws in the same order (``Replay``; the
        ``turns`` factory is called again, as on an out-of-memory retry), counted in ``pool_widened``. The admission's
        informative rate is the one observed in earlier rollouts (checkpointed); the length predictor learns
        from the trained groups. ``adaptive``: a group without spread grows first and is dropped only when it
        cannot grow (:mod:`infgrpo.sampler.engine.adaptive`; not with ``rounds``). ``turns``: multi-turn samples, as
        in :meth:`sample` (a group is judged once its samples' last turns ended). ``vision``: each drawn prompt's
        images by draw position (a vision-language model), a list that ``source`` appends to as it yields each
        prompt: a prompt's images go through the vision tower in its one prefill, as in :meth:`sample`, and
        ``Rollouts.vision`` holds those of the groups trained on.
        """
        self.config.require_engine("dynamic_sampling")
        adapt_threads(self.model, rows=spec.target_groups * group_size)
        start = self._start()
        spec = dataclasses.replace(spec, informative_rate=self.rate.estimate())
        if adaptive is not None:
            check_grow_scheme(spec.scheme)
        plan = FeedPlan(group_size, seed, prompt_offset, None, Replay(source), spec, max_prompt_len, adaptive, vision)
        widened = 0
        with self._decoding():
            while True:
                slots = self.sizer.slots(self.model, [[self.pad_id] * plan.max_prompt_len])
                try:
                    rollouts = self._on_engine(plan, slots, ranks, turns)
                    break
                except PromptTooLong as err:  # a later draw outgrew the pool (an environment's observation)
                    plan.max_prompt_len, widened = err.length, widened + 1  # a wider pool; the same draws again
                    self.pools.release()
        rollouts.stats["pool_widened"] = widened
        if vision is not None and any(v is not None for v in vision):  # the update encodes the trained groups' images
            rollouts.vision = [vision[i] for i in rollouts.drawn or []]
        return self._finish(rollouts, start)

    def generate_one(
        self,
        prompt_ids: list[list[int]],
        batch_size: int = 128,
        turns: Callable[[], Turns] | None = None,
        vision: list[VisionInputs | None] | None = None,
    ) -> Rollouts:
        """One completion per prompt (evaluation, e.g. greedy), on the slots a rollout of these prompts gets.

        The slot count is the rollout's plan for ``prompt_ids`` (``num_slots``, or under 'auto' what
        ``rollout_memory`` holds), at most ``batch_size``: evaluation never takes more memory than the
        rollouts it sits between, whatever the evaluation batch. ``turns`` and ``vision``: multi-turn samples and
        each prompt's images, as in :meth:`sample`.
        """
        check_prompts(self.model, prompt_ids, self.config.max_new_tokens, vision)
        planned = self.sizer.slots(self.model, prompt_ids)
        field = "data.eval_batch_size" if batch_size <= planned else "model.sampler.num_slots"
        if turns is not None and self.config.decoder != "engine":
            self.config.require_engine("agent")
        with self._decoding():
            rollouts, retries = self._backoff(
                lambda n: self._decode(prompt_ids, 1, 0, n, turns, vision), min(batch_size, planned), field
            )
        rollouts.stats["oom_retries"] = retries
        return rollouts

    def release(self) -> None:
        """Frees the KV slot pool and its captured decode step now; the next rollout allocates them again."""
        self.pools.release()

    @contextlib.contextmanager
    def _decoding(self) -> Iterator[None]:
        """Eval mode and no gradients while decoding; afterwards the model's mode back, the pool freed unless kept."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            self.model.train(was_training)
            if not self.keeps_pool():
                self.release()

    def keeps_pool(self) -> bool:
        """Whether the slot pool stays allocated after a rollout (``keep_pool``; 'auto': on CUDA only)."""
        keep = self.config.keep_pool
        return keep if isinstance(keep, bool) else next(self.model.parameters()).device.type == "cuda"

    def _on_engine(
        self, plan: FeedPlan, slots: int, ranks: Ranks | None, turns: Callable[[], Turns] | None = None
    ) -> Rollouts:
        """Decodes ``plan`` on the engine (a new feed, and new looks, again with half the slots on OOM); returns the
        groups the feed trains on, prompt-major, with what it found. What the rollout teaches the next ones is
        learned here: the informative share (dynamic sampling), the rescue rates (adaptive groups) and, from the
        trained groups' lengths, the length predictor."""
        predictor = self.predictor
        attempt = functools.partial(self._attempt, plan, turns=turns)
        (feed, stats, looks), retries = self._backoff(attempt, slots, "model.sampler.num_slots")
        chosen = feed.trained()
        rows = [s for i in chosen for s in feed.rows(i)]  # group_size of each (of a grown group: the judge's pick)
        rollouts = Rollouts.from_sequences([feed.row_prompt(i) for i in chosen], feed.group_size, rows, feed.prompts)
        rollouts.stats = stats.to_stats([s.model_tokens for group in feed.groups for s in group])  # all decoded
        rollouts.tools = stats.tools
        rollouts.dynamic = found = feed.summary()
        if found is not None:
            rollouts.drawn = chosen
            rollouts.stats.update(found.stats())
            self.rate.observe(found.groups_kept, found.groups_kept + found.groups_dropped)
        if feed.grow is not None:
            rollouts.adaptive = feed.grow.summary()
            rollouts.stats.update(rollouts.adaptive.stats())
            self.rescue.observe(feed.grow.counts)
        rollouts.stats["oom_retries"] = retries
        if looks is not None and chosen:
            seen = looks.picked(chosen)
            rollouts.stats.update(prediction_stats(seen.lengths, rollouts.lengths, feed.group_size))
            # every data-parallel rank learns the pooled update, so their predictors stay identical
            predictor.sync = pool_over_ranks(ranks.gather) if ranks is not None and ranks.world_size > 1 else None
            predictor.learn(seen, rollouts.lengths, feed.group_size)
            rollouts.stats["predict_time_s"] = seen.seconds
        return rollouts

    def _attempt(
        self, plan: FeedPlan, num_slots: int, turns: Callable[[], Turns] | None = None
    ) -> tuple[Feed, EngineStats, Looks | None]:
        """One engine run of ``plan`` on ``num_slots`` slots: a new feed, new looks at the prompts' lengths and, with
        ``turns``, a new Turns from it."""
        looks = Looks(self.predictor, self.model, plan.vision) if self.predictor is not None else None
        feed = make_feed(plan, looks, self.rescue)
        return feed, self.engine.run(feed, num_slots, None if turns is None else turns(), plan.vision), looks

    def _decode(
        self,
        prompt_ids: list[list[int]],
        group_size: int,
        seed: int,
        num_slots: int,
        turns: Callable[[], Turns] | None = None,
        vision: list[VisionInputs | None] | None = None,
    ) -> Rollouts:
        """One engine run of a fixed batch on ``num_slots`` slots, no length prediction, as :class:`Rollouts`."""
        feed = FixedBatch(prompt_ids, group_size, seed)
        stats = self.engine.run(feed, num_slots, None if turns is None else turns(), vision)
        rollouts = Rollouts.from_sequences(prompt_ids, group_size, feed.initial())  # every sequence, prompt-major
        rollouts.vision = vision
        rollouts.stats = stats.to_stats(rollouts.model_lengths)
        rollouts.tools = stats.tools
        return rollouts

    def _start(self) -> float:
        """A rollout starts: the device's peak memory reset; returns the start time."""
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        return time.perf_counter()

    def _finish(self, rollouts: Rollouts, start: float) -> Rollouts:
        """A rollout ended: counted (it seeds the next), timed, and its device peak memory recorded."""
        self.calls += 1
        rollouts.stats["wall_time_s"] = wall = time.perf_counter() - start
        rollouts.stats["tokens_per_s"] = rollouts.stats["generated_tokens"] / wall if wall > 0 else 0.0
        if torch.cuda.is_available():
            rollouts.stats["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
        return rollouts

    def _backoff(self, decode: Callable[[int], T], slots: int, field: str) -> tuple[T, int]:
        """``decode(slots)``; when it runs out of device memory, again with half the slots, down to one.

        Completions do not depend on the slot count (one random stream per sequence), so a retry
        returns exactly what the first attempt would have. The count that worked is kept in
        ``slot_cap`` for later rollouts. Returns what ``decode`` returned and the halvings (``oom_retries``).
        ``field`` names the setting to lower in the warning and in the error raised when even one
        slot does not fit.
        """
        halve = functools.partial(self._halve, field=field)
        result, _, retries = retry_on_oom(decode, min(slots, self.slot_cap) if self.slot_cap else slots, halve)
        return result, retries

    def _halve(self, slots: int, message: str, field: str) -> int:
        """The slots of the next attempt after one on ``slots`` ran out of memory (``message``), with a warning naming
        ``field``; an error when even one slot did not fit."""
        if slots == 1:
            raise torch.OutOfMemoryError(
                f"the rollout ran out of device memory even with one slot ({field}): the model and "
                f"one sequence of up to max_new_tokens={self.config.max_new_tokens} tokens after its "
                "prompt do not fit. Lower model.sampler.max_new_tokens or data.max_prompt_length, "
                f"or load the model in 4-bit (model.quantization.load_in_4bit). Cause: {message}"
            )
        self.pools.release()
        smaller = max(1, slots // 2)
        warnings.warn(
            f"[infgrpo] the rollout ran out of device memory with {slots} slots ({first_line(message)}); "
            f"retrying with {smaller}. Set {field} to {smaller} or less to skip this.",
            InfgrpoWarning,
            stacklevel=4,  # the sampler's method that asked for the rollout
        )
        self.slot_cap = smaller
        return smaller

    def _baseline(self, prompt_ids: list[list[int]], group_size: int, seed: int, prompt_offset: int) -> Rollouts:
        """The configured HF decoder (:data:`~infgrpo.sampler.hf.baselines.BASELINES`) over the rollout."""
        cfg = self.config
        decode = BASELINES.get(cfg.decoder)
        slots = group_size if decode.whole_group else self.sizer.slots(self.model, prompt_ids)
        kw = generation_kwargs(cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p, self.stop_ids, self.pad_id)
        request = DecodeRequest(prompt_ids, group_size, slots, seed, prompt_offset, kw, kv_bytes_per_token(self.model))
        return decode(self.model, request)

    # -- checkpointing ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Checkpoint state: the number of calls (it seeds the next rollout), the config, and the length predictor's."""
        state = {"calls": self.calls, "config": asdict(self.config), "informative_rate": self.rate.state_dict()}
        state["rescue_rates"] = self.rescue.state_dict()
        if self.predictor is not None:
            state["predictor"] = self.predictor.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores the call count and, when both have one, the length predictor; the saved config is not applied."""
        self.calls = int(state["calls"])
        if "informative_rate" in state:
            self.rate.load_state_dict(state["informative_rate"])
        if "rescue_rates" in state:
            self.rescue.load_state_dict(state["rescue_rates"])
        if self.predictor is not None and "predictor" in state:
            self.predictor.load_state_dict(state["predictor"])
