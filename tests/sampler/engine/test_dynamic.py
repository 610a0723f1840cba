"""Dynamic sampling on the slot-pool engine: prompts drawn while decoding, groups judged as they end.

The reference for every completion is the plain engine: a kept group must equal what ``sample`` draws for that
prompt at its position in the draw order (the completion depends only on seed, position and sample index).
"""

import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.data.datamodule import encode_prompt, load_rows
from infgrpo.rewards.synthetic import synthetic_reward
from infgrpo.sampler.engine.dynamic import InformativeRate
from infgrpo.sampler.engine.plan import DynamicSpec
from infgrpo.settings import InfgrpoWarning
from tests.sampler.test_oom_backoff import memory_limit

G = 4


@pytest.fixture(scope="module")
def task(tokenizer):
    rows = load_rows("tiny", "train")[:48]
    return rows, [encode_prompt(tokenizer, r["prompt"], None, True) for r in rows]


def judge_of(tokenizer, rows, calls=None):
    """The synthetic reward's spread: informative when the group's rewards are not all equal."""

    def keep(position, group):
        if calls is not None:
            calls.append(position)
        texts = tokenizer.batch_decode([s.token_ids for s in group], skip_special_tokens=True)
        row = rows[position]
        return len(set(synthetic_reward(texts, [row["prompt"]] * len(group), [row["answer"]] * len(group)))) > 1

    return keep


def sampler(model, tokenizer, **cfg):
    return MicroGroupSampler(model, tokenizer, SamplerConfig(**{"num_slots": 8, "max_new_tokens": 24, **cfg}))


def run(model, tokenizer, task, spec_kw=None, **cfg):
    rows, prompts = task
    spec = DynamicSpec(**{"target_groups": 3, "max_prompts": 12, "keep": judge_of(tokenizer, rows), **(spec_kw or {})})
    s = sampler(model, tokenizer, **cfg)
    return s, s.sample_dynamic(iter(prompts), G, seed=1, spec=spec, max_prompt_len=max(map(len, prompts)))


@pytest.mark.parametrize("refill", ["fifo", "lpt", "sjf", "planned"])
@pytest.mark.parametrize("scheme", ["continuous", "rounds"])
def test_each_kept_group_is_what_the_plain_engine_draws_for_that_prompt(tiny_model, tokenizer, task, refill, scheme):
    rows, prompts = task
    _, out = run(tiny_model, tokenizer, task, {"scheme": scheme, "round_size": 3}, refill=refill)
    assert len(out.drawn) == 3 and out.drawn == sorted(out.drawn)
    keep = judge_of(tokenizer, rows)
    plain = sampler(tiny_model, tokenizer, num_slots=3)
    for k, position in enumerate(out.drawn):
        ref = plain.sample([prompts[position]], G, seed=1, prompt_offset=position)
        assert out.completion_ids[k * G : (k + 1) * G] == ref.completion_ids
        for a, b in zip(out.logprobs[k * G : (k + 1) * G], ref.logprobs, strict=True):
            assert torch.allclose(a, b, atol=1e-6)
        assert out.prompt_ids[k] == prompts[position]
    # what was judged informative is, by the same reward: every trained group has a spread
    groups = [[type("S", (), {"token_ids": c})() for c in out.completion_ids[k * G : (k + 1) * G]] for k in range(3)]
    assert all(keep(p, g) for p, g in zip(out.drawn, groups, strict=True))


def test_the_counts_add_up_and_the_continuous_scheme_draws_lazily(tiny_model, tokenizer, task):
    _, cont = run(tiny_model, tokenizer, task)
    _, rounds = run(tiny_model, tokenizer, task, {"scheme": "rounds", "round_size": 3})
    for out in (cont, rounds):
        st = {k.removeprefix("dynamic/"): v for k, v in out.stats.items() if k.startswith("dynamic/")}
        assert st["groups_kept"] >= 3 and st["groups_trained"] == 3 and st["capped"] == 0
        judged = st["groups_kept"] + st["groups_dropped"]
        assert st["informative_rate"] == pytest.approx(st["groups_kept"] / judged)
        trained = sum(len(c) for c in out.completion_ids)
        # every decoded token is trained on, dropped, or wasted (cancelled, or trimmed past the target)
        assert out.stats["generated_tokens"] == trained + st["dropped_tokens"] + st["wasted_tokens"]
    assert rounds.stats["dynamic/prompts_drawn"] % 3 == 0  # whole rounds
    assert cont.stats["dynamic/groups_kept"] == 3  # stops at the target: nothing to trim
    assert cont.stats["decode_steps"] <= rounds.stats["decode_steps"]  # refill keeps the pool busy


def test_at_the_cap_the_step_trains_on_the_groups_dropped_last(tiny_model, tokenizer, task):
    calls = []

    def never(position, group):
        calls.append(position)
        return False

    _, out = run(tiny_model, tokenizer, task, {"keep": never, "max_prompts": 7})
    assert out.stats["dynamic/prompts_drawn"] == 7 and out.stats["dynamic/capped"] == 1.0
    assert sorted(calls) == list(range(7))  # every drawn group was finished and judged
    assert out.drawn == [4, 5, 6] and out.stats["dynamic/groups_trained"] == 3


def test_a_source_that_runs_dry_returns_what_it_found(tiny_model, tokenizer, task):
    rows, prompts = task
    s = sampler(tiny_model, tokenizer)
    spec = DynamicSpec(target_groups=3, max_prompts=12, keep=judge_of(tokenizer, rows))
    out = s.sample_dynamic(iter(prompts[:2]), G, seed=1, spec=spec, max_prompt_len=max(map(len, prompts)))
    assert out.stats["dynamic/prompts_drawn"] == 2 and len(out.drawn) <= 2


def test_out_of_memory_retries_with_half_the_slots_and_draws_the_same_groups(tiny_model, tokenizer, task):
    _, want = run(tiny_model, tokenizer, task, num_slots=4)
    handle = memory_limit(tiny_model, 4)
    try:
        with pytest.warns(InfgrpoWarning, match="retrying with"):
            _, got = run(tiny_model, tokenizer, task, num_slots=16)
    finally:
        handle.remove()
    assert got.stats["oom_retries"] >= 1 and got.stats["num_slots"] <= 4
    assert got.drawn == want.drawn and got.completion_ids == want.completion_ids


def test_the_informative_rate_is_learned_across_rollouts_and_checkpointed(tiny_model, tokenizer, task):
    s, out = run(tiny_model, tokenizer, task)
    judged = out.stats["dynamic/groups_kept"] + out.stats["dynamic/groups_dropped"]
    assert s.rate.estimate() == pytest.approx((out.stats["dynamic/groups_kept"] + 1) / (judged + 2))
    fresh = sampler(tiny_model, tokenizer)
    fresh.load_state_dict(s.state_dict())
    assert fresh.rate == s.rate and InformativeRate().estimate() == 0.5


def test_a_cap_below_the_target_and_another_decoder_are_refused(tiny_model, tokenizer, task):
    with pytest.raises(ValueError, match="max_prompts=2 must be >= target_groups=3"):
        run(tiny_model, tokenizer, task, {"max_prompts": 2})
    with pytest.raises(ValueError, match="dynamic_sampling.enabled needs sampler.decoder='engine'"):
        run(tiny_model, tokenizer, task, decoder="hf_micro")


@pytest.mark.parametrize("scheme", ["continuous", "rounds"])
def test_one_token_completions_draw_up_to_max_prompts(tiny_model, tokenizer, task, scheme):
    """Every sample ends on its first token, so nothing ever runs in the pool: the rollout must still admit
    until the feed has drawn max_prompts (it stopped after two such admissions)."""
    _, prompts = task
    spec = DynamicSpec(3, 12, lambda position, group: False, scheme=scheme, round_size=3)
    out = sampler(tiny_model, tokenizer, max_new_tokens=1).sample_dynamic(
        iter(prompts), G, seed=1, spec=spec, max_prompt_len=max(map(len, prompts))
    )
    assert out.dynamic.prompts_drawn == 12 and out.dynamic.groups_dropped == 12 and out.dynamic.capped
    assert out.stats["decode_steps"] == 0 and all(len(ids) == 1 for ids in out.completion_ids)


def test_a_drawn_prompt_longer_than_the_pool_widens_it_and_the_rollout_replays(tiny_model, tokenizer, task):
    """An environment's observation of a later draw can be the longest prompt: the pool is widened to it and the
    same draws decoded again, giving what a pool wide enough from the start gives."""
    rows, prompts = task
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # shortest first: later draws are longer
    drawn = [prompts[i] for i in order]
    spec = DynamicSpec(target_groups=3, max_prompts=12, keep=judge_of(tokenizer, [rows[i] for i in order]))
    out = {}
    for name, width in (("wide", len(drawn[-1])), ("narrow", len(drawn[0]))):
        out[name] = sampler(tiny_model, tokenizer).sample_dynamic(iter(drawn), G, 1, spec, max_prompt_len=width)
    assert out["narrow"].stats["pool_widened"] >= 1 and out["wide"].stats["pool_widened"] == 0
    assert out["narrow"].drawn == out["wide"].drawn and out["narrow"].completion_ids == out["wide"].completion_ids
