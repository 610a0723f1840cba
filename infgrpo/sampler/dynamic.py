"""Dynamic sampling: the engine draws prompts while it decodes, and replaces the groups that teach nothing.

    spec = DynamicSpec(target_groups=4, max_prompts=16, keep=judge)        # judge(i, group) -> informative?
    run = DynamicRun(engine, source, group_size=8, seed=0, spec=spec, num_slots=32, max_prompt_len=96)
    result = run.run()                  # result.selected: the draw positions of the groups the step trains on

The step needs ``target_groups`` informative groups (DAPO's dynamic sampling: a group whose rewards are all
equal has advantage 0 everywhere, no gradient). Prompts come from ``source`` (token ids) only as the pool
needs work; when the last sample of a group ends, ``spec.keep`` judges it right there (the caller scores it);
a dropped group's place goes to the next prompt. Two schemes, on the same engine and random streams (a
completion depends only on (seed, prompt position, sample index), so both decode the same completions of a
prompt):

- ``continuous`` (ours): a prompt is drawn when a free slot would otherwise wait and the groups in flight are
  not expected to be enough (``kept + rate x in_flight < target``, ``rate`` the informative share observed
  so far); the rollout ends the moment the target is met, and the sequences still running are cancelled
  (their tokens are counted as ``wasted_tokens``: a slot pool that refills has at most a pool's worth of
  them in flight; carrying them into the next step would sample them under the previous policy).
- ``rounds`` (verl's ``filter_groups``): ``round_size`` prompts decoded to their end, judged, then another
  round, until the target is met; informative groups past the target are trimmed (waste).

At ``max_prompts`` drawn with fewer informative groups than the target, the step trains on the informative
ones and, for the rest, the groups it dropped last (advantage 0: no gradient, and the update skips them), so
the loss keeps the normalization of a full batch (``capped``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from infgrpo.sampler.counter_rng import stream_key
from infgrpo.sampler.model_runner import ModelRunner
from infgrpo.sampler.refill import REFILL_POLICIES
from infgrpo.sampler.scheduler import Scheduler
from infgrpo.sampler.sequence import Sequence

Scheme = Literal["continuous", "rounds"]


@dataclass
class DynamicSpec:
    """What a dynamic rollout must find, and how it judges a group."""

    target_groups: int
    """Informative groups the step needs (its batch size)."""
    max_prompts: int
    """Most prompts drawn in one rollout (>= ``target_groups``)."""
    keep: Callable[[int, list[Sequence]], bool]
    """``keep(position, group)``: whether the finished group of the ``position``-th prompt drawn is informative."""
    informative_rate: float = 0.5
    """The expected share of informative groups, for admission (the sampler learns it across steps)."""
    scheme: Scheme = "continuous"
    round_size: int = 0
    """Prompts a round (``rounds``; default: ``target_groups``)."""


@dataclass
class DynamicResult:
    """A dynamic rollout: every prompt drawn, the groups decoded, which were judged, kept, trained on."""

    prompts: list[list[int]]
    groups: list[list[Sequence]]
    kept: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    selected: list[int] = field(default_factory=list)
    """Positions of the groups the step trains on, ascending."""
    stats: dict[str, Any] = field(default_factory=dict)


class Replay:
    """A prompt source that can be read again from its start: an out-of-memory retry of a dynamic rollout draws the
    same prompts in the same order, then goes on with the source."""

    def __init__(self, source: Iterator[list[int]]) -> None:
        self.source, self.seen = source, []

    def rewind(self) -> Iterator[list[int]]:
        """An iterator over the prompts drawn so far, then the source's next ones (recorded as they come)."""
        yield from list(self.seen)
        for prompt in self.source:
            self.seen.append(prompt)
            yield prompt


@dataclass
class InformativeRate:
    """The share of groups that were informative, over recent rollouts: ``(kept + 1) / (judged + 2)``, each
    rollout's counts added to sums that decay by ``decay`` per rollout (so the estimate follows training)."""

    kept: float = 0.0
    judged: float = 0.0
    decay: float = 0.8

    def estimate(self) -> float:
        """The expected informative share of the next groups (0.5 before any was judged)."""
        return (self.kept + 1.0) / (self.judged + 2.0)

    def observe(self, kept: int, judged: int) -> None:
        """One rollout's groups: ``kept`` informative of ``judged``."""
        self.kept = self.kept * self.decay + kept
        self.judged = self.judged * self.decay + judged

    def state_dict(self) -> dict[str, float]:
        """The decayed sums (checkpointed: a resumed run admits as the interrupted one would have)."""
        return {"kept": self.kept, "judged": self.judged}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restores :meth:`state_dict`."""
        self.kept, self.judged = float(state["kept"]), float(state["judged"])


class DynamicRun:
    """One dynamic rollout on an engine's pool (see the module docstring); :meth:`run` decodes it."""

    def __init__(
        self,
        engine: Any,
        source: Iterator[list[int]],
        group_size: int,
        seed: int,
        spec: DynamicSpec,
        num_slots: int,
        max_prompt_len: int,
        predict: Callable[[list[int]], float | None] | None = None,
        prompt_offset: int = 0,
    ) -> None:
        if spec.max_prompts < spec.target_groups:
            raise ValueError(f"max_prompts={spec.max_prompts} must be >= target_groups={spec.target_groups}")
        self.engine, self.source, self.g, self.seed, self.spec = engine, source, group_size, seed, spec
        self.predict, self.offset = predict, prompt_offset
        cfg = engine.config
        self.slots = min(num_slots, spec.max_prompts * group_size)
        pool, step = engine.pools.get(engine.model, self.slots, max_prompt_len + cfg.max_new_tokens, engine.settings)
        self.pool, self.step = pool, step
        refill = cfg.refill if predict is not None else "fifo"
        self.policy = REFILL_POLICIES.get(refill)([], self.slots, planner=cfg.planner, epsilon=cfg.planner_epsilon)
        self.sched = Scheduler(self.policy, self.slots, group_size, cfg.max_new_tokens, engine.stop_ids)
        self.result = DynamicResult([], [])
        self.runner = ModelRunner(engine.model, pool, step, engine.settings, self.result.prompts, self.result.groups)
        self.left: list[int] = []  # samples of each drawn group still decoding or waiting
        self.exhausted = False
        self.max_prompt_len = max_prompt_len

    # -- drawing ------------------------------------------------------------------------------
    def draw(self) -> bool:
        """Takes the next prompt from the source and queues its group; False when the source is exhausted."""
        try:
            prompt = list(next(self.source))
        except StopIteration:
            self.exhausted = True
            return False
        if len(prompt) > self.max_prompt_len:
            raise ValueError(f"a drawn prompt has {len(prompt)} tokens, more than max_prompt_len={self.max_prompt_len}")
        i = len(self.result.prompts)
        self.result.prompts.append(prompt)
        group = [Sequence(i, j, key=stream_key(self.seed, self.offset + i, j)) for j in range(self.g)]
        if self.predict is not None:
            guess = self.predict(prompt)
            for s in group:
                s.predicted_length = guess
        self.result.groups.append(group)
        self.left.append(self.g)
        self.policy.extend(group, self.sched.now)
        return True

    def in_flight(self) -> int:
        """Groups drawn and not judged yet."""
        r = self.result
        return len(r.prompts) - len(r.kept) - len(r.dropped)

    def top_up(self) -> None:
        """Draws prompts by the scheme's rule (see the module docstring)."""
        spec, r = self.spec, self.result
        if spec.scheme == "rounds":
            if self.sched.running or len(self.policy) or len(r.kept) >= spec.target_groups:
                return
            for _ in range(min(spec.round_size or spec.target_groups, spec.max_prompts - len(r.prompts))):
                if not self.draw():
                    break
            return
        while (
            not self.exhausted
            and len(r.prompts) < spec.max_prompts
            and len(r.kept) + spec.informative_rate * self.in_flight() < spec.target_groups
            and len(self.policy) < len(self.sched.free)
        ):
            self.draw()

    # -- judging ------------------------------------------------------------------------------
    def ended(self, seqs: list[Sequence]) -> None:
        """Counts ``seqs`` as finished; a group whose last sample this was is judged (in draw order)."""
        done = []
        for seq in seqs:
            self.left[seq.prompt_idx] -= 1
            if self.left[seq.prompt_idx] == 0:
                done.append(seq.prompt_idx)
        for i in sorted(done):
            (self.result.kept if self.spec.keep(i, self.result.groups[i]) else self.result.dropped).append(i)

    def complete(self) -> bool:
        """Whether the rollout can stop: the target met (``rounds``: once the round is over)."""
        met = len(self.result.kept) >= self.spec.target_groups
        if self.spec.scheme == "rounds":
            return met and not self.sched.running and not len(self.policy)
        return met

    # -- the loop -----------------------------------------------------------------------------
    def admit(self) -> None:
        """The engine's admission (:meth:`Engine.admit`), noting the one-token completions that end at once."""
        sched, runner, started = self.sched, self.runner, []
        while picks := sched.schedule():
            runner.prefill(sched.to_prefill(picks))
            ends = [sched.append(seq, *runner.first_token(seq)) for _, seq in picks]
            started += sched.start(picks, ends)
            done = [seq for (_, seq), end in zip(picks, ends, strict=True) if end]
            runner.keep(sched.release(done))
            self.ended(done)
        for slot, seq in started:
            runner.load(slot, seq)
        runner.keep(sched.release(seq for _, seq in started))

    def run(self) -> DynamicResult:
        """Decodes until the target is met, ``max_prompts`` are drawn and judged, or the source runs dry."""
        sched, runner = self.sched, self.runner
        self.top_up()
        self.admit()
        while not self.complete():
            if not sched.running:  # every drawn group judged (or ended on its first tokens): draw again, or stop
                self.top_up()
                self.admit()
                if not sched.running:
                    break
                continue
            running = dict(sched.running)
            ended = sched.postprocess(runner.decode())
            runner.update(sched.running, ended)
            self.ended([running[slot] for slot in ended])
            if self.complete():
                break
            self.top_up()
            self.admit()
        return self.finish()

    def finish(self) -> DynamicResult:
        """The groups the step trains on (the target's informative groups, or at the cap the informative ones and
        the last dropped), and the rollout's statistics."""
        r, spec = self.result, self.spec
        target = spec.target_groups
        selected = r.kept[:target]
        if len(selected) < target:  # capped (or the source ran dry): fill with the groups dropped last
            selected = selected + r.dropped[len(r.dropped) - min(target - len(selected), len(r.dropped)) :]
        r.selected = sorted(selected)
        tokens = [sum(len(s) for s in group) for group in r.groups]
        judged = set(r.kept) | set(r.dropped)
        trimmed = [i for i in r.kept if i not in r.selected]
        r.stats = {
            "prompts_drawn": len(r.prompts),
            "groups_kept": len(r.kept),
            "groups_dropped": len(r.dropped),
            "groups_trained": len(r.selected),
            "informative_rate": len(r.kept) / len(judged) if judged else 0.0,
            "dropped_tokens": sum(tokens[i] for i in r.dropped),
            "wasted_tokens": sum(tokens[i] for i in range(len(tokens)) if i not in judged)
            + sum(tokens[i] for i in trimmed),
            "capped": float(len(r.kept) < target),
            "cancelled_sequences": sum(1 for i in range(len(tokens)) if i not in judged for s in r.groups[i]),
        }
        return r
