"""Adaptive groups on the slot-pool engine: stalled groups grow by more samples of their prompt.

The reference for every completion is the plain engine: sample j of prompt i of a grown group must equal the
plain engine's sample j of that prompt (its stream depends only on seed, prompt and sample index).
"""

import dataclasses

import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.data.datamodule import encode_prompt, load_rows
from infgrpo.rewards.synthetic import synthetic_reward
from infgrpo.sampler import AdaptiveSpec, DynamicSpec
from infgrpo.sampler.engine.dynamic import InformativeRate
from infgrpo.sampler.engine.rescue_rates import RescueRates, rescue_chance
from infgrpo.settings import InfgrpoWarning
from tests.helpers import ALLOW_02_REWARDS
from tests.sampler.test_oom_backoff import memory_limit

G, CAP = 4, 24


@pytest.fixture(scope="module")
def task(tokenizer):
    rows = load_rows("tiny", "train")[:8]
    return rows, [encode_prompt(tokenizer, r["prompt"], None, True) for r in rows]


class Judge:
    """The synthetic reward: spread = rewards not all equal; one reward level; select = the first right and wrong
    samples; records every judgement."""

    def __init__(self, tokenizer, rows, never=False):
        self.tokenizer, self.rows, self.never = tokenizer, rows, never
        self.calls: list[tuple[int, int, bool]] = []  # (prompt, samples judged, spread)
        self.selected: dict[int, list[int]] = {}

    def rewards(self, i, group):
        texts = self.tokenizer.batch_decode([s.token_ids for s in group], skip_special_tokens=True)
        return synthetic_reward(texts, [self.rows[i]["prompt"]] * len(group), [self.rows[i]["answer"]] * len(group))

    def spread(self, i, group):
        spread = not self.never and len(set(self.rewards(i, group))) > 1
        self.calls.append((i, len(group), spread))
        return spread

    def level(self, i):
        return "all"

    def select(self, i, group, m):
        r = self.rewards(i, group)
        best = [j for j in range(len(r)) if r[j] == max(r)]
        rest = [j for j in range(len(r)) if r[j] != max(r)]
        self.selected[i] = sorted(best[:1] + rest[: m - 1])
        return self.selected[i]

    def spec(self, **kw):
        kw = {"max_samples_per_prompt": CAP, "max_samples_per_step": 96, **kw}
        return AdaptiveSpec(self, **kw)


def sampler(model, tokenizer, **cfg):
    return MicroGroupSampler(model, tokenizer, SamplerConfig(**{"num_slots": 8, "max_new_tokens": 24, **cfg}))


@pytest.fixture(scope="module")
def plain(tiny_model, tokenizer, task):
    """Every prompt's first CAP samples on the plain engine."""
    return sampler(tiny_model, tokenizer, num_slots=5).sample(task[1], CAP, seed=3)


@pytest.mark.parametrize("rule", ["uniform", "value"])
@pytest.mark.parametrize("refill", ["fifo", "lpt"])
def test_every_trained_row_is_the_plain_engines_sample_of_its_index(tiny_model, tokenizer, task, plain, rule, refill):
    judge = Judge(tokenizer, task[0])
    out = sampler(tiny_model, tokenizer, refill=refill).sample(task[1], G, seed=3, adaptive=judge.spec(rule=rule))
    assert len(out.completion_ids) == len(task[1]) * G and len(out.sample_ids) == len(out.completion_ids)
    for row, (ids, logp, j) in enumerate(zip(out.completion_ids, out.logprobs, out.sample_ids, strict=True)):
        ref = (row // G) * CAP + j
        assert ids == plain.completion_ids[ref]
        assert torch.allclose(logp, plain.logprobs[ref], atol=1e-6)
    st = out.stats
    assert st["adaptive/groups_extended"] >= 1 and st["adaptive/groups_rescued"] >= 1  # the task has stalled groups
    # a grown group that found a spread trains on what select picked; one that did not, on its first G
    for i in range(len(task[1])):
        ids = out.sample_ids[i * G : (i + 1) * G]
        assert ids == judge.selected.get(i, list(range(G)))


def test_groups_grow_only_without_spread_within_the_prompt_cap_and_the_budget(tiny_model, tokenizer, task):
    judge = Judge(tokenizer, task[0])
    out = sampler(tiny_model, tokenizer).sample(task[1], G, seed=3, adaptive=judge.spec(max_samples_per_step=64))
    seen: dict[int, list[tuple[int, bool]]] = {}
    for i, n, spread in judge.calls:
        seen.setdefault(i, []).append((n, spread))
    for history in seen.values():
        assert history[0][0] == G  # judged first at group_size
        assert all(not spread for _, spread in history[:-1])  # grown only while it had no spread
        assert all(b - a == G for (a, _), (b, _) in zip(history, history[1:], strict=False))  # extend_by = G
        assert history[-1][0] <= CAP
    st = out.stats
    assert st["adaptive/samples_per_prompt_max"] <= CAP
    assert st["adaptive/samples_per_prompt_mean"] * len(task[1]) <= 64
    assert st["adaptive/extension_samples"] == sum(n for h in seen.values() for n, _ in h[-1:]) - G * len(seen)
    assert st["adaptive/budget_used"] <= 1.0


def test_the_rescue_chance_matches_the_beta_binomial_by_simulation():
    torch.manual_seed(0)
    for n, k, a, b in [(8, 8, 0.5, 0.5), (24, 8, 0.5, 0.5), (8, 16, 0.2, 1.8), (0, 1, 1.0, 1.0)]:
        q = torch.distributions.Beta(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64))
        draws = q.sample((400_000,))
        w = (1 - draws) ** n  # the posterior after n agreeing samples, by importance weights on the prior
        want = 1 - float((w * (1 - draws) ** k).sum() / w.sum())
        assert rescue_chance(n, k, a, b) == pytest.approx(want, abs=4e-3)
    assert rescue_chance(0, 1, 1.0, 1.0) == pytest.approx(0.5)  # uniform prior: a new sample differs half the time
    assert rescue_chance(8, 8, 0.5, 0.5) > rescue_chance(16, 8, 0.5, 0.5)  # a group stalled longer is less hopeful
    rates = RescueRates()
    assert rates.prior(0.0) == (0.5, 0.5)
    rates.observe({"0.0": (40, 4)})
    a, b = rates.prior(0.0)
    assert a / (a + b) == pytest.approx(4.5 / 41) and rates.prior(1.0) == (0.5, 0.5)


def test_the_sampler_learns_each_rollouts_rescue_counts_once_and_the_summary_is_typed(tiny_model, tokenizer, task):
    judge = Judge(tokenizer, task[0], never=True)  # every group grows to its cap of 12: 8 extension samples each
    s = sampler(tiny_model, tokenizer)
    out = s.sample(task[1], G, seed=3, adaptive=judge.spec(max_samples_per_prompt=12))
    grew = out.adaptive
    assert grew.groups_stalled == grew.groups_extended == 8 and grew.groups_rescued == 0
    assert grew.extension_samples == 8 * (12 - G) and grew.samples_per_prompt_max == 12 and grew.budget_used == 1.0
    assert {k: v for k, v in out.stats.items() if k.startswith("adaptive/")} == grew.stats()
    assert s.rescue.drawn == {"all": 64.0} and s.rescue.found == {"all": 0.0}  # observed once, by the sampler
    s.sample(task[1], G, seed=4, adaptive=judge.spec(max_samples_per_prompt=12))
    assert s.rescue.drawn == {"all": 64.0 * s.rescue.decay + 64.0}
    assert s.sample(task[1], G, seed=3).adaptive is None


def test_the_slot_pool_bounds_memory_whatever_the_cap(tiny_model, tokenizer, task):
    judge = Judge(tokenizer, task[0], never=True)  # every group grows to its cap
    s = sampler(tiny_model, tokenizer)
    small = s.sample(task[1], G, seed=3)
    big = s.sample(task[1], G, seed=3, adaptive=judge.spec(max_samples_per_prompt=64, max_samples_per_step=512))
    assert big.stats["adaptive/samples_per_prompt_max"] == 64
    assert big.stats["generated_tokens"] > 8 * small.stats["generated_tokens"]
    assert big.stats["num_slots"] == small.stats["num_slots"] == 8
    assert big.stats["kv_bytes_peak"] <= 1.05 * small.stats["kv_bytes_peak"]


def test_out_of_memory_retries_with_half_the_slots_and_trains_on_the_same_rows(tiny_model, tokenizer, task):
    want = sampler(tiny_model, tokenizer, num_slots=8).sample(
        task[1], G, seed=3, adaptive=Judge(tokenizer, task[0]).spec()
    )
    handle = memory_limit(tiny_model, 8)  # the length predictor looks at the 8 prompts in one forward
    try:
        with pytest.warns(InfgrpoWarning, match="retrying with"):
            got = sampler(tiny_model, tokenizer, num_slots=32).sample(
                task[1], G, seed=3, adaptive=Judge(tokenizer, task[0]).spec()
            )
    finally:
        handle.remove()
    assert got.stats["oom_retries"] >= 1
    assert got.completion_ids == want.completion_ids and got.sample_ids == want.sample_ids


def test_with_dynamic_sampling_a_group_that_cannot_grow_is_dropped(tiny_model, tokenizer, task):
    judge = Judge(tokenizer, task[0], never=True)
    spec = DynamicSpec(2, 4, judge.spread)
    out = sampler(tiny_model, tokenizer).sample_dynamic(
        iter(task[1]), G, 3, spec, max(map(len, task[1])), adaptive=judge.spec(max_samples_per_prompt=12)
    )
    assert out.dynamic.capped and out.dynamic.groups_dropped == 4 and out.dynamic.groups_kept == 0
    assert out.stats["adaptive/samples_per_prompt_max"] == 12  # each grew to its cap before it was dropped
    assert len(out.completion_ids) == 2 * G and out.sample_ids == list(range(G)) * 2


def never_spreading(model, tokenizer, task, rule, kept, judged):
    """A dynamic rollout with adaptive groups (cap 12) whose groups never spread, the sampler having judged
    ``kept`` of ``judged`` fresh groups informative before (its learned rate: what a fresh prompt is worth)."""
    judge, s = Judge(tokenizer, task[0], never=True), sampler(model, tokenizer)
    s.rate = InformativeRate(kept, judged)
    out = s.sample_dynamic(
        iter(task[1]), G, 3, DynamicSpec(2, 4, judge.spread), max(map(len, task[1])),
        adaptive=judge.spec(max_samples_per_prompt=12, rule=rule),
    )  # fmt: skip
    return judge, out


def test_value_or_draw_drops_a_stalled_group_for_a_fresh_prompt_likelier_per_token(tiny_model, tokenizer, task):
    judge, out = never_spreading(tiny_model, tokenizer, task, "value_or_draw", 1000, 1000)  # fresh: ~all informative
    first = judge.calls[0][0]  # it stalled while a prompt could still be drawn: given up at G, never extended
    assert [n for i, n, _ in judge.calls if i == first] == [G]
    extended = out.stats["adaptive/groups_extended"]
    assert out.dynamic.prompts_drawn == 4 and out.dynamic.groups_dropped == 4 and 1 <= extended < 4
    assert out.stats["adaptive/samples_per_prompt_mean"] == (4 * G + extended * (12 - G)) / 4  # extended: to 12
    _, value = never_spreading(tiny_model, tokenizer, task, "value", 1000, 1000)
    assert value.stats["adaptive/groups_extended"] == 4  # the value rule extends every one


def test_value_or_draw_is_value_where_a_fresh_prompt_is_less_likely_per_token(tiny_model, tokenizer, task):
    _, got = never_spreading(tiny_model, tokenizer, task, "value_or_draw", 0, 10_000)  # fresh: ~never informative
    _, want = never_spreading(tiny_model, tokenizer, task, "value", 0, 10_000)
    assert got.completion_ids == want.completion_ids and got.sample_ids == want.sample_ids
    adaptive = {k: v for k, v in want.stats.items() if k.startswith("adaptive/")}
    assert {k: got.stats[k] for k in adaptive} == adaptive and adaptive["adaptive/groups_extended"] == 4


def test_bad_settings_are_refused(tiny_model, tokenizer, task):
    judge = Judge(tokenizer, task[0])
    with pytest.raises(ValueError, match="max_samples_per_prompt=2 is below group_size=4"):
        sampler(tiny_model, tokenizer).sample(task[1], G, seed=3, adaptive=judge.spec(max_samples_per_prompt=2))
    with pytest.raises(ValueError, match="adaptive_groups.enabled needs sampler.decoder='engine'"):
        sampler(tiny_model, tokenizer, decoder="hf_micro").sample(task[1], G, seed=3, adaptive=judge.spec())
    rounds = dataclasses.replace(DynamicSpec(2, 4, judge.spread), scheme="rounds")
    with pytest.raises(ValueError, match="grow inside the continuous scheme"):
        sampler(tiny_model, tokenizer).sample_dynamic(iter(task[1]), G, 3, rounds, 64, adaptive=judge.spec())


def same_reward_for_all(completions, metadata, **info):
    """A reward that never varies: every group stalls, and no extension can find a spread."""
    return [0.5] * len(completions)


@ALLOW_02_REWARDS
def test_a_reward_that_never_varies_warns_once_after_three_steps_of_extensions_without_a_rescue(tmp_path):
    from infgrpo import GRPOModule
    from infgrpo.data import PromptDataModule
    from tests.helpers import trainer

    module = GRPOModule(
        group_size=2, sampler={"num_slots": 4, "max_new_tokens": 4},
        rewards={"functions": {f"{__name__}:same_reward_for_all": 1.0}, "accuracy": None},
        adaptive_groups={"enabled": True, "max_samples_per_prompt": 4},
    )  # fmt: skip
    with pytest.warns(
        InfgrpoWarning, match=r"none found a reward spread \(rescue rate 0 of \d+\).*max_samples_per_prompt=4"
    ):
        trainer(tmp_path, 3, enable_checkpointing=False).fit(
            module, PromptDataModule(path="tiny", batch_size=2, eval_split=None)
        )
    assert module.judged.unrescued and len(module.judged.unrescued) == 3


@pytest.mark.parametrize("rule", ["uniform", "value"])
def test_groups_of_one_token_completions_grow_to_the_cap(tiny_model, tokenizer, task, rule):
    """Every sample ends on its first token (nothing runs in the pool): stalled groups still grow to the cap."""
    judge = Judge(tokenizer, task[0], never=True)
    spec = judge.spec(max_samples_per_prompt=12, max_samples_per_step=24, rule=rule)
    out = sampler(tiny_model, tokenizer, max_new_tokens=1).sample(task[1][:2], G, seed=3, adaptive=spec)
    assert out.stats["adaptive/samples_per_prompt_max"] == 12 and out.stats["adaptive/samples_per_prompt_mean"] == 12
    assert [n for _, n, _ in judge.calls if n == 12] and out.stats["decode_steps"] == 0
