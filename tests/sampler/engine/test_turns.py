"""Multi-turn samples in the engine (tools): schedule-free tokens, TRL's loop as the reference, rollback, memory.

The Turns here are real ones over token ids: a turn that ends on EOS "calls a tool" (while the sample has had fewer
than ``rounds`` tool rounds), whose result is the ChatML tool-response suffix TRL's ``_get_tool_suffix_ids`` gives
for the content 5, delivered by a thread pool after a per-call latency.
"""

import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.data.datamodule import encode_prompt
from infgrpo.policy.load import load_policy
from infgrpo.sampler.engine.model_runner import ModelRunner
from infgrpo.sampler.engine.plan import DynamicSpec
from infgrpo.sampler.engine.slot_pool import pool_width
from infgrpo.settings import ConfigError

SUFFIX_TEXT = "\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def model64():
    return load_policy("tiny").eval().double()


@pytest.fixture(scope="module")
def suffix(tokenizer):
    return tokenizer.encode(SUFFIX_TEXT, add_special_tokens=False)


@pytest.fixture(scope="module")
def chat_prompts(tokenizer):
    return [encode_prompt(tokenizer, p, None, True) for p in ("rev abcdefg", "count 3 9", "dup ab")]


class NoRecord:
    """What every Turns also has: call counters (the engine's ToolSummary reads them) and a record of each sample."""

    calls = failures = timeouts = dropped = 0

    def ended(self, seq, prompt):
        return None


class ToolResponses(NoRecord):
    """Turns: each turn that ended on EOS gets the suffix after a random latency, up to ``rounds`` rounds a sample."""

    def __init__(self, suffix, rounds=2, seed=0, max_latency=0.01):
        self.suffix, self.rounds, self.rng, self.max_latency = suffix, rounds, random.Random(seed), max_latency
        self.pool = ThreadPoolExecutor(4)
        self.turns_seen, self.rolled = [], []

    def turn_ended(self, seq, prompt):
        self.turns_seen.append((seq.prompt_idx, seq.sample_idx, list(seq.token_ids[seq.turn_start :])))
        if seq.turns >= self.rounds:
            return None
        latency = self.rng.random() * self.max_latency
        return self.pool.submit(lambda: (time.sleep(latency), list(self.suffix))[1])

    def rolled_back(self, seq):
        self.rolled.append((seq.prompt_idx, seq.sample_idx))


def sample(model, tok, prompts, turns, num_slots, max_new_tokens, group_size, **kw):
    cfg = SamplerConfig(num_slots=num_slots, max_new_tokens=max_new_tokens, **kw)  # default refill: lpt
    return MicroGroupSampler(model, tok, cfg).sample(prompts, group_size, seed=3, turns=lambda: turns)


def test_tokens_masks_and_logprobs_do_not_depend_on_slots_or_tool_latency(model64, tokenizer, chat_prompts, suffix):
    outs = []
    for n, seed in ((1, 0), (3, 1), (8, 2)):
        turns = ToolResponses(suffix, seed=seed)
        out = sample(model64, tokenizer, chat_prompts, turns, n, 140, 4)
        outs.append((out, turns))
    ref, turns = outs[0]
    assert ref.tool_masks is not None and ref.tools.rounds > 4  # tools were called, samples resumed
    assert any(m.count(0) == 2 * len(suffix) for m in ref.tool_masks)  # some sample had two tool rounds
    for out, _ in outs[1:]:
        assert out.completion_ids == ref.completion_ids
        assert out.tool_masks == ref.tool_masks
        assert all(torch.equal(a, b) for a, b in zip(out.logprobs, ref.logprobs, strict=True))
    for ids, mask, logp in zip(ref.completion_ids, ref.tool_masks, ref.logprobs, strict=True):
        assert len(mask) == len(ids) == len(logp)
        assert all(logp[i] == 0.0 for i, m in enumerate(mask) if m == 0)  # tool tokens carry no log-prob
        zeros = [i for i, m in enumerate(mask) if m == 0]
        for start in zeros[:: len(suffix)]:  # each tool block is the suffix, right after an EOS the model sampled
            assert ids[start : start + len(suffix)] == suffix and ids[start - 1] == tokenizer.eos_token_id


def trl_greedy_reference(model, prompt, suffix, max_new, eos, rounds, context):
    """TRL's ``_tool_call_loop`` with HF ``generate``: generate to EOS; while the turn called a tool (ended on EOS)
    and rounds remain, roll back when the suffix does not fit, else generate again from prompt + completion + suffix,
    the new turn cut to what is left of ``max_new`` (tool tokens count)."""

    def generate(ids, n):
        out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=n, eos_token_id=eos, pad_token_id=0)[
            0, len(ids) :
        ].tolist()
        return out[: out.index(eos) + 1] if eos in out else out

    completion = generate(prompt, max_new)
    mask = [1] * len(completion)
    turn, iterations = completion, 0
    while turn and turn[-1] == eos and iterations < rounds:
        pct = prompt + completion + suffix
        if len(pct) - len(prompt) > max_new or len(pct) >= context:
            break  # rolled back: the completion as it is
        post = generate(pct, max_new)[: max_new - (len(completion) + len(suffix))]
        completion, mask = completion + suffix + post, mask + [0] * len(suffix) + [1] * len(post)
        turn, iterations = post, iterations + 1
    return completion, mask


def test_greedy_equals_trls_loop_over_hf_generate(model64, tokenizer, chat_prompts, suffix):
    max_new, eos = 120, tokenizer.eos_token_id
    prompts = [*chat_prompts, encode_prompt(tokenizer, "rev xy", None, True)]  # its last turn runs to max_new
    turns = ToolResponses(suffix, rounds=2)
    out = sample(model64, tokenizer, prompts, turns, 2, max_new, 2, temperature=0.0)
    context = model64.config.max_position_embeddings
    assert out.finish_reasons[-1] == "length" and out.tool_masks[-1].count(1) > 40
    for i, prompt in enumerate(prompts):
        want_ids, want_mask = trl_greedy_reference(model64, prompt, suffix, max_new, eos, 2, context)
        for j in range(2):
            assert out.completion_ids[2 * i + j] == want_ids
            assert out.tool_masks[2 * i + j] == want_mask
    assert out.tools.rounds == 3 * 2 * 2 + 2  # twice a sample; "rev xy" once (its second turn hit max_new)


def test_rollback_when_the_suffix_passes_max_new_tokens_or_the_context(model64, tokenizer, chat_prompts, suffix):
    prompt = chat_prompts[1]
    plain = sample(model64, tokenizer, [prompt], None, 1, 120, 1, temperature=0.0)
    first = plain.completion_ids[0]
    assert plain.finish_reasons == ["stop"]
    # one token short of the suffix: rolled back, the sample ends as it is, with no tool mask
    turns = ToolResponses(suffix)
    out = sample(model64, tokenizer, [prompt], turns, 1, len(first) + len(suffix) - 1, 1, temperature=0.0)
    assert out.completion_ids == [first] and out.tool_masks is None and out.finish_reasons == ["stop"]
    assert turns.rolled == [(0, 0)] and out.tools.rounds == 1
    # exactly room for the suffix (TRL's `>`): appended, nothing generated after it
    turns = ToolResponses(suffix)
    out = sample(model64, tokenizer, [prompt], turns, 1, len(first) + len(suffix), 1, temperature=0.0)
    assert out.completion_ids == [first + suffix] and out.finish_reasons == ["length"] and not turns.rolled
    assert out.tool_masks == [[1] * len(first) + [0] * len(suffix)]
    # the same, but prompt + completion + suffix reaches the context (TRL's `>=`): rolled back
    old = model64.config.max_position_embeddings
    model64.config.max_position_embeddings = len(prompt) + len(first) + len(suffix)
    try:
        turns = ToolResponses(suffix)
        out = sample(model64, tokenizer, [prompt], turns, 1, len(first) + len(suffix), 1, temperature=0.0)
    finally:
        model64.config.max_position_embeddings = old
    assert out.completion_ids == [first] and turns.rolled == [(0, 0)]


class AllWait(NoRecord):
    """Turns: one tool round a sample; no future resolves before every sample's first turn has ended."""

    def __init__(self, suffix, total):
        self.suffix, self.total, self.pending, self.peak = suffix, total, [], 0

    def turn_ended(self, seq, prompt):
        if seq.turns:
            return None
        future = Future()
        self.pending.append(future)
        self.peak = max(self.peak, len(self.pending))
        if len(self.pending) == self.total:
            for f in self.pending:
                f.set_result(list(self.suffix))
        return future

    def rolled_back(self, seq):
        raise AssertionError("no rollback expected")


def test_the_pool_holds_at_most_num_slots_sequences_while_every_sample_waits(model64, tokenizer, chat_prompts, suffix):
    G, slots = 8, 2
    turns = AllWait(suffix, total=2 * G)
    out = sample(model64, tokenizer, chat_prompts[:2], turns, slots, 120, G, temperature=0.0)
    assert turns.peak == 2 * G  # every sample waited on its tool at once
    assert out.tools.rounds == 2 * G and out.tool_masks is not None
    timeline = out.stats["timeline"]
    assert len(timeline) == 2 * 2 * G  # one entry per turn
    for step in range(out.stats["decode_steps"] + 1):
        in_pool = [e for e in timeline if e[0] >= 0 and e[3] <= step < e[4]]
        assert len(in_pool) <= slots
        assert len({e[0] for e in in_pool}) == len(in_pool)  # one sequence a slot
    # K/V: the pool, the prompts and at most one re-prefilled sample a slot, whatever G
    per_token = 2 * 4 * 2 * 32 * 8  # (K and V) x layers x kv_heads x head_dim x float64 bytes
    width = max(map(len, chat_prompts[:2])) + 120
    assert out.stats["kv_bytes_peak"] <= (slots * pool_width(width) + 2 * width + slots * width) * per_token


class OneSlowTool(NoRecord):
    """Turns: the first sample whose turn ends calls a tool that sleeps until every sample's first turn ended (the
    others call none)."""

    def __init__(self, suffix, group_size):
        self.suffix, self.group_size, self.seen, self.slow = suffix, group_size, 0, None
        self.release = threading.Event()

    def turn_ended(self, seq, prompt):
        self.seen += 1
        if self.seen == self.group_size:
            self.release.set()
        if self.slow is not None:
            return None
        self.slow = seq
        future = Future()

        def run():
            self.release.wait(timeout=30)
            time.sleep(0.02)
            future.set_result(list(self.suffix))

        threading.Thread(target=run, daemon=True).start()
        return future

    def rolled_back(self, seq):
        raise AssertionError("no rollback expected")


def test_decoding_goes_on_while_a_tool_sleeps(model64, tokenizer, chat_prompts, suffix):
    turns = OneSlowTool(suffix, group_size=5)
    out = sample(model64, tokenizer, chat_prompts[:1], turns, 2, 120, 5, temperature=0.0)
    stats = out.stats
    assert turns.seen == 6 and out.finish_reasons[1:] == ["stop"] * 4  # every turn ended on EOS
    # samples 2-4 decoded while sample 0 waited (samples 0 and 1 ran first, side by side)
    assert out.tools.rounds == 1 and out.tools.steps_while_waiting > 0 and out.tools.wait_s > 0.02
    assert out.tools.steps_while_waiting < stats["decode_steps"]
    assert [0 in m for m in out.tool_masks] == [True, False, False, False, False]


def test_without_turns_no_tool_fields(model64, tokenizer, chat_prompts):
    out = sample(model64, tokenizer, chat_prompts[:1], None, 2, 20, 2)
    assert out.tool_masks is None and out.tools is None


def test_turns_need_the_engine_decoder(model64, tokenizer, chat_prompts, suffix):
    cfg = SamplerConfig(num_slots=2, max_new_tokens=8, decoder="hf_micro")
    with pytest.raises(ConfigError, match=r"^agent.tools or agent.environment needs sampler.decoder='engine'"):
        MicroGroupSampler(model64, tokenizer, cfg).sample(chat_prompts, 2, turns=lambda: ToolResponses(suffix))


@pytest.mark.parametrize("refill", ["fifo", "planned"])
def test_every_refill_policy_gives_the_same_multi_turn_samples(model64, tokenizer, chat_prompts, suffix, refill):
    """A resumed sample is served ahead of the policy's queue and the policy hears only of first turns (the planned
    policy's bookkeeping of its slots stays whole); the tokens never depend on the order."""
    ref = sample(model64, tokenizer, chat_prompts, ToolResponses(suffix, max_latency=0.0), 3, 60, 3)
    out = sample(model64, tokenizer, chat_prompts, ToolResponses(suffix, seed=5), 3, 60, 3, refill=refill)
    assert out.completion_ids == ref.completion_ids and out.tool_masks == ref.tool_masks
    assert out.tools.rounds == ref.tools.rounds > 0


def test_dynamic_sampling_judges_a_group_after_its_samples_last_turns(model64, tokenizer, chat_prompts, suffix):
    judged = []

    def keep(position, group):
        judged.extend((s.prompt_idx, s.sample_idx, s.finish_reason, s.turns) for s in group)
        return True

    turns = ToolResponses(suffix, rounds=1)
    spec = DynamicSpec(target_groups=2, max_prompts=3, keep=keep)
    cfg = SamplerConfig(num_slots=3, max_new_tokens=100)
    out = MicroGroupSampler(model64, tokenizer, cfg).sample_dynamic(
        iter(chat_prompts), 3, seed=1, spec=spec, max_prompt_len=max(map(len, chat_prompts)), turns=lambda: turns
    )
    assert len(out) == 6 and out.tool_masks is not None and out.tools.rounds > 0
    assert len(judged) >= 6
    for i, j, reason, rounds in judged:  # none judged while it waited on its tool or had a turn left
        assert reason == "length" or rounds == 1 or (i, j) in turns.rolled


def test_a_resumed_sample_prefills_only_what_it_has_no_kv_for(model64, tokenizer, chat_prompts, suffix, monkeypatch):
    """A sample that leaves for its tools parks its K/V (within the pool's size), so its resume prefills its last
    token and the tool results only; with none parked it builds on its prompt's kept K/V; before issue 59 it
    prefilled prompt + tokens so far. The same tokens and log-probs every way (float64)."""
    runs = {}
    for way, park, on_prompt in (("parked", None, True), ("prompt", 0, True), ("before", 0, False)):
        monkeypatch.setattr(ModelRunner, "resume_on_prompt", on_prompt)
        if park is not None:  # no room to park: the prompt's K/V are what a resume builds on
            monkeypatch.setattr(ModelRunner, "park", lambda self, seq: None)
        runs[way] = sample(model64, tokenizer, chat_prompts, ToolResponses(suffix, rounds=1), 8, 140, 3)
    ref = runs["before"]
    for out in runs.values():
        assert out.completion_ids == ref.completion_ids and out.tool_masks == ref.tool_masks
        assert all(torch.equal(a, b) for a, b in zip(out.logprobs, ref.logprobs, strict=True))
    resumes = [sum(1 for t in range(1, len(m)) if m[t - 1] == 0 and m[t] == 1) for m in ref.tool_masks]
    assert sum(resumes) >= 4  # samples came back from their tool and went on
    prompts = sum(map(len, chat_prompts))  # each prompt prefilled once
    assert runs["parked"].stats["prefill_tokens"] == prompts + sum(resumes) * (1 + len(suffix))
    saved = sum(n * len(chat_prompts[k // 3]) for k, n in enumerate(resumes))  # each resume's prompt, not again
    assert ref.stats["prefill_tokens"] - runs["prompt"].stats["prefill_tokens"] == saved
