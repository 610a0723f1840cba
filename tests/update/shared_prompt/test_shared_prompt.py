"""The shared-prompt update: each prompt once per micro-batch, the same log-probs, loss and gradients.

Every equality is against the unshared ``prompt + completion`` rows in float64, with the models' RMSNorms
computing in float64 (``tests.helpers.float64_norms``: transformers' own norm runs in float32).
"""

import gc
import weakref
import zlib

import pytest
import torch

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.algo import Objective
from infgrpo.data import PromptDataModule
from infgrpo.sampler import Rollouts
from infgrpo.settings import InfgrpoWarning
from infgrpo.update import LossConfig, accumulate_policy_gradients, completion_logprobs, prepare_microbatches
from infgrpo.update.config import UpdateConfig
from infgrpo.update.runner import PolicyUpdate
from infgrpo.update.shared_prompt.batching import (
    MICRO_BATCH_TOKENS,
    collate_shared,
    pack_groups_by_token_budget,
    prepare_shared_microbatches,
    split_group,
    split_shared,
)
from infgrpo.update.shared_prompt.carry import PromptCarry, carried_prompts
from infgrpo.update.shared_prompt.check import resolve_share_prompt, share_prompt_reason
from infgrpo.update.shared_prompt.prefix_cache import PromptCapture, PromptPrefix
from infgrpo.update.step import frozen_logprobs
from tests.helpers import (
    ALLOW_SKIP_OFF,
    dequantized_reference,
    float64_norms,
    random_model,
    trained_4bit_lora,
    trainer,
    with_lora,
)

# 3 prompts (ragged) x G=3 completions: ragged, one empty, one of a single token
PROMPTS = [[1, 5, 7, 9], [3, 4], [8, 9, 10, 11, 12, 13, 14]]
COMPLETIONS = [[20, 21, 22], [30, 31, 32, 33, 34, 35], [40], [], [50, 51], [52, 53, 54, 55], [60], [61, 62], [63]]
ROW_PROMPT = [0, 0, 0, 1, 1, 1, 2, 2, 2]


def logprobs_and_grads(model, mbs, chunk, carry=True):
    """Per-row log-probs (N, C_max) of the micro-batches and the gradients of a fixed weighted sum of them,
    forward + backward per micro-batch as the update runs them (``carry``: a split group's prompt once)."""
    model.zero_grad(set_to_none=True)
    n, width = len(COMPLETIONS), max(map(len, COMPLETIONS))
    out = torch.zeros(n, width, dtype=torch.float64)
    weights = torch.randn(n, width, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    prompts = PromptCarry(mbs) if carry else None
    for mb in mbs:
        lp = completion_logprobs(model, mb, 0.7, chunk, carry=prompts) * mb.completion_mask  # (n_mb, C_mb)
        (lp * weights[mb.rows, : lp.shape[1]]).sum().backward()
        out[mb.rows, : lp.shape[1]] = lp.detach().double()
    return out, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def unshared(budget=10_000):
    return prepare_microbatches([PROMPTS[p] for p in ROW_PROMPT], COMPLETIONS, budget, pad_id=0)


@pytest.mark.parametrize("arch,tied", [("qwen3", True), ("llama", False)])
@pytest.mark.parametrize("lora", [None, ["q_proj", "v_proj"], ["q_proj", "v_proj", "lm_head"]])
@pytest.mark.parametrize("chunk", [0, 5])  # full logits, and the chunked head
@pytest.mark.parametrize("budget", [10_000, 30, 12])  # groups together; groups whole; groups split
def test_shared_logprobs_and_gradients_equal_the_unshared_rows_float64(arch, tied, lora, chunk, budget):
    model = float64_norms(random_model(arch, torch.float64, tie_word_embeddings=tied).train())
    if lora:
        model = with_lora(model, lora)
    shared = prepare_shared_microbatches(PROMPTS, ROW_PROMPT, COMPLETIONS, budget, pad_id=0)
    if budget == 12:  # some group spans micro-batches: its prompt runs once (carried), or in each of them
        assert carried_prompts(shared) and any(len(mb.rows) < 3 for mb in shared)
    if budget == 10_000:  # groups of similar lengths share a micro-batch: several prompts in one
        assert any(mb.prompt_ids.shape[0] > 1 for mb in shared)
    want, want_grads = logprobs_and_grads(model, unshared(), chunk)
    for carry in (True, False) if budget == 12 else (True,):
        got, got_grads = logprobs_and_grads(model, shared, chunk, carry)
        assert (got - want).abs().max() <= 1e-10
        assert want_grads.keys() == got_grads.keys() and len(want_grads) >= 4
        for k, g in want_grads.items():
            assert g.abs().max() > 0, k
            assert (got_grads[k] - g).abs().max() <= 1e-10, k


@pytest.mark.parametrize("budget", [10_000, 12])
def test_a_sliding_window_shorter_than_the_sequences_is_in_both_forwards(budget):
    """A Qwen3 whose second layer attends within 3 positions: the shared path's own masks close the same keys the
    unshared rows' (transformers' masks from the 2D padding mask) do, in the prompt and the completion forwards."""
    model = float64_norms(random_model("qwen3", torch.float64, use_sliding_window=True, sliding_window=3,
                                       max_window_layers=1).train())  # fmt: skip
    assert share_prompt_reason(model) is None
    want, want_grads = logprobs_and_grads(model, unshared(), 0)
    got, got_grads = logprobs_and_grads(model, prepare_shared_microbatches(PROMPTS, ROW_PROMPT, COMPLETIONS, budget,
                                                                            pad_id=0), 5)  # fmt: skip
    assert (got - want).abs().max() <= 1e-10
    assert want_grads.keys() == got_grads.keys()
    for k, g in want_grads.items():
        assert (got_grads[k] - g).abs().max() <= 1e-10, k


def test_the_loss_and_the_gradients_of_an_update_equal_the_unshared_ones_with_checkpointing():
    model = float64_norms(random_model("qwen3", torch.float64))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    adv = torch.randn(len(COMPLETIONS), generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    cfg = LossConfig(Objective(loss_type="dapo"), max_completion_length=8, logit_chunk_tokens=4)
    results = []
    carried = prepare_shared_microbatches(PROMPTS, ROW_PROMPT, COMPLETIONS, 12, pad_id=0)
    assert carried_prompts(carried)  # a group over several micro-batches: its prompt's graph kept across them
    for mbs in (unshared(), prepare_shared_microbatches(PROMPTS, ROW_PROMPT, COMPLETIONS, 20, pad_id=0), carried):
        model.zero_grad(set_to_none=True)
        stats = accumulate_policy_gradients(model, mbs, adv, cfg, lambda loss: loss.backward()).stats
        results.append((stats["loss"], {k: p.grad.clone() for k, p in model.named_parameters()}))
    (loss_a, grads_a), *others = results
    assert abs(loss_a) > 1e-6
    for loss_b, grads_b in others:
        assert abs(loss_a - loss_b) <= 1e-12
        for k, g in grads_a.items():
            assert (grads_b[k] - g).abs().max() <= 1e-10, k


# hand-made splits of the three groups: prompt 1's group over two or three micro-batches, the empty completion
# (row 3) alone in the last one (nothing reads the prompt's last hidden state there) or in the first
SPLITS = {
    "empty-last": [[0, 1, 2], [4, 5], [3], [6, 7, 8]],
    "empty-first": [[3], [5], [4], [0, 1], [2], [6, 7, 8]],
}


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("chunk", [0, 5])
def test_a_split_groups_prompt_runs_once_and_gathers_the_gradient_of_every_micro_batch(split, chunk):
    model = float64_norms(random_model("qwen3", torch.float64, tie_word_embeddings=False).train())
    mbs = [collate_shared(rows, ROW_PROMPT, PROMPTS, COMPLETIONS, pad_id=0) for rows in SPLITS[split]]
    uses = carried_prompts(mbs)
    assert uses == ({1: 2} if split == "empty-last" else {1: 3, 0: 2})
    forwards = []
    hook = model.model.embed_tokens.register_forward_hook(lambda m, args, out: forwards.append(args[0].shape))
    want, want_grads = logprobs_and_grads(model, unshared(), chunk)
    forwards.clear()
    got, got_grads = logprobs_and_grads(model, mbs, chunk)
    # one completion forward per micro-batch, one prompt forward per group
    assert len(forwards) == len(mbs) + 3
    with torch.no_grad():
        frozen = frozen_logprobs(model, mbs, 0.7, chunk_tokens=chunk)  # without gradients, carried too
    hook.remove()
    assert len(forwards) == 2 * (len(mbs) + 3)
    assert (got - want).abs().max() <= 1e-10
    for mb, lp in zip(mbs, frozen, strict=True):
        assert (lp * mb.completion_mask - want[mb.rows, : lp.shape[1]]).abs().max() <= 1e-10
    assert want_grads.keys() == got_grads.keys()
    for k, g in want_grads.items():  # the embedding's rows of prompt-only tokens: the prompt's backward
        assert (got_grads[k] - g).abs().max() <= 1e-10, k
    prompt_only = sorted({t for p in PROMPTS for t in p} - {t for c in COMPLETIONS for t in c})
    assert got_grads["model.embed_tokens.weight"][prompt_only].abs().sum(dim=1).min() > 0


def test_4bit_lora_shared_gradients_match_a_dequantized_float64_reference(tokenizer, tmp_path):
    policy, base = trained_4bit_lora("qwen3", tokenizer, tmp_path / "base")
    ref = float64_norms(dequantized_reference(policy, base, lora_r=4)).train()
    policy.train()
    shared = prepare_shared_microbatches(PROMPTS, ROW_PROMPT, COMPLETIONS, 30, pad_id=0)
    want_lp, want = logprobs_and_grads(ref, unshared(), chunk=0)  # float64, full logits, unshared
    got_lp, got = logprobs_and_grads(policy, shared, chunk=4)  # 4-bit base, float32, shared, chunked
    assert len(want) == len(got) == 28
    assert torch.allclose(got_lp, want_lp, atol=1e-5)
    for name, g in want.items():
        assert g.norm() > 0, name
        assert torch.allclose(got[name].double(), g, rtol=1e-4, atol=1e-6 * g.abs().max().item()), name


def test_packing_counts_each_prompt_once_and_keeps_every_micro_batch_within_the_budget():
    prompt_lengths = [40, 5, 12]
    row_prompt = [0] * 6 + [1] * 3 + [2] * 4
    completion_lengths = [3, 8, 2, 5, 1, 4, 9, 9, 9, 2, 2, 2, 2]
    for budget in (30, 80, 200, 10_000):
        groups = pack_groups_by_token_budget(row_prompt, prompt_lengths, completion_lengths, budget)
        assert sorted(i for g in groups for i in g) == list(range(13))
        for g in groups:
            prompts = {row_prompt[i] for i in g}
            cost = len(prompts) * max(prompt_lengths[p] for p in prompts) + len(g) * max(
                completion_lengths[i] for i in g
            )
            assert cost <= budget or len(g) == 1
    # the 40-token prompt's 6 completions (longest 8) fit one micro-batch of 40 + 6 x 8 = 88 tokens, not 6 rows
    # of 48 (288 tokens, the unshared layout): shared, the whole group is one micro-batch at budget 100
    groups = pack_groups_by_token_budget(row_prompt, prompt_lengths, completion_lengths, 100)
    assert sorted(next(g for g in groups if 0 in g)) == [0, 1, 2, 3, 4, 5]
    # at 60 the group is split, each part with its prompt once
    groups = pack_groups_by_token_budget(row_prompt, prompt_lengths, completion_lengths, 60)
    parts = [g for g in groups if row_prompt[g[0]] == 0]
    assert len(parts) >= 2 and all({row_prompt[i] for i in g} == {0} for g in parts)
    with pytest.raises(ValueError, match="token_budget=0 must be >= 1"):
        pack_groups_by_token_budget(row_prompt, prompt_lengths, completion_lengths, 0)


def test_split_halves_keep_their_prompts_and_compute_the_same_logprobs():
    model = float64_norms(random_model("llama", torch.float64))
    mb = collate_shared(list(range(9)), ROW_PROMPT, PROMPTS, COMPLETIONS, pad_id=0)
    old = torch.randn(mb.completion_ids.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    mb.frozen.old = old
    halves = split_shared(mb)
    assert [h.rows for h in halves] == [[0, 1, 2, 3], [4, 5, 6, 7, 8]]
    assert [h.prompt_ids.shape for h in halves] == [(2, 4), (2, 7)]  # prompts 0, 1 | 1, 2; padding dropped
    whole = completion_logprobs(model, mb, 1.0, 3) * mb.completion_mask
    for half in halves:
        lp = completion_logprobs(model, half, 1.0, 3) * half.completion_mask
        o = half.frozen.old
        assert half.frozen.ref is None and torch.equal(o, old[half.rows, : o.shape[1]])
        assert (lp - whole[half.rows, : lp.shape[1]]).abs().max() <= 1e-12
        assert half.padded_tokens < mb.padded_tokens


def test_auto_turns_sharing_off_with_a_reason_where_it_cannot_be_exact():
    plain = random_model("qwen3")
    assert share_prompt_reason(plain) is None and resolve_share_prompt(plain, "auto") is True
    carried = random_model("qwen3", use_sliding_window=True, sliding_window=8, max_window_layers=1)
    assert share_prompt_reason(carried) is None  # full and sliding layer_types: the masks carry the window
    windowed = random_model("qwen3", use_sliding_window=True, sliding_window=8, max_window_layers=1)
    windowed.config.layer_types = None  # read by the rule only (the probe never runs): a window with no layer types
    assert "sliding-window" in share_prompt_reason(windowed)
    with pytest.warns(InfgrpoWarning, match="share_prompt: off, because the model has sliding-window"):
        assert resolve_share_prompt(windowed, "auto") is False
    with pytest.raises(ValueError, match="share_prompt='on' cannot be exact for this model: the model has sliding"):
        resolve_share_prompt(windowed, "on")
    reentrant = random_model("llama")
    reentrant.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    assert "reentrant" in share_prompt_reason(reentrant)
    assert resolve_share_prompt(windowed, "off") is False
    with pytest.raises(ValueError, match="share_prompt='sometimes' is not known; valid: auto, on, off"):
        resolve_share_prompt(plain, "sometimes")


@ALLOW_SKIP_OFF
def test_one_training_step_gives_the_same_parameters_shared_or_not_float64(tmp_path):
    """The whole step on the tiny model: reference (beta) and old-policy (mu = 2) log-probs, two optimizer steps."""
    params, moments = [], []
    for share in ("off", "on"):
        torch.manual_seed(0)
        module = GRPOModule(
            policy={"dtype": "float64"}, group_size=4,
            sampler=SamplerConfig(num_slots=4, max_new_tokens=16, temperature=0.9), objective={"beta": 0.04},
            update={"num_iterations": 2, "token_budget": 96, "share_prompt": share},
            optimizer={"learning_rate": 1e-2}, lora={"r": 4, "dropout": 0.0},
        )  # fmt: skip
        assert module.updater.share_prompt == (share == "on")
        float64_norms(module.policy)
        before = {k: p.detach().clone() for k, p in module.policy.named_parameters()}
        fit = trainer(tmp_path / share, 1, enable_checkpointing=False)
        fit.fit(module, PromptDataModule(path="tiny", batch_size=2, eval_split=None))
        state = fit.optimizers[0].state
        params.append({k: p.detach().clone() for k, p in module.policy.named_parameters()})
        moments.append({k: state[p]["exp_avg"].clone() for k, p in module.policy.named_parameters() if p in state})
    (off, on), (m_off, m_on) = params, moments
    assert sum(not torch.equal(off[k], before[k]) for k in off) >= 4  # the step trained (LoRA)
    assert len(m_off) >= 4 and m_off.keys() == m_on.keys()
    # Not compared at float64 rounding: AdamW moves a weight by ~lr * m / (sqrt(v) + eps), and where |g| is near
    # eps (1e-8) a rounding difference of 1e-14 in g moves it by up to lr / eps * 1e-14; the second step's gradients,
    # at those weights, then differ too (seen: weights 1.5e-6 apart and first moments 6e-7 apart relative to their
    # largest entry, on two CPUs; 0 and 5e-8 on others). A sharing error moves weights by ~lr = 1e-2 and the
    # moments by their own size; the gradients of one forward are compared at 1e-10 in the tests above.
    for k in m_off:
        assert (m_off[k] - m_on[k]).abs().max() <= 1e-5 * m_off[k].abs().max(), k
    for k in off:
        assert (off[k] - on[k]).abs().max() <= 1e-4, k


def test_an_update_reports_fewer_padded_tokens_when_sharing():
    rollouts = Rollouts(PROMPTS, 3, COMPLETIONS, [torch.zeros(len(c)) for c in COMPLETIONS], ["stop"] * 9)
    update = UpdateConfig(token_budget=10_000, skip_zero_advantage="off")
    shared = PolicyUpdate(update, share_prompt=True).pack(rollouts, 10_000)
    plain = PolicyUpdate(update).pack(rollouts, 10_000)
    assert sum(mb.padded_tokens for mb in shared) == 3 * 7 + 9 * 6  # prompts once, padded to the longest
    assert sum(mb.padded_tokens for mb in plain) == 9 * (7 + 6)


def test_the_probe_turns_sharing_off_for_attention_that_ignores_the_cache():
    model = random_model("llama")
    for layer in model.model.layers:  # an attention that never reads the cache (as custom kernels may)
        forward = layer.self_attn.forward
        layer.self_attn.forward = lambda *a, _f=forward, **kw: _f(*a, **{**kw, "cache": None})
    assert share_prompt_reason(model).startswith("the shared-prompt forward fails on LlamaForCausalLM")


def test_4bit_lora_with_checkpointing_shares_prompts_and_keeps_their_gradients(tokenizer, tmp_path):
    # peft's k-bit preparation used to leave torch's default, reentrant checkpointing, under which the prompt's
    # K/V reach the completions without their autograd history: same loss, prompt gradients silently lost
    from infgrpo.policy.load import load_policy
    from tests.helpers import save_base

    base = save_base("qwen3", tokenizer, tmp_path / "base")
    torch.manual_seed(0)
    policy = load_policy(
        base, lora_r=4, load_in_4bit=True, bnb_4bit_compute_dtype="float32", gradient_checkpointing=True
    )
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1, generator=torch.Generator().manual_seed(zlib.crc32(name.encode())))
    assert share_prompt_reason(policy) is None
    policy.train()
    shared = prepare_shared_microbatches(PROMPTS, ROW_PROMPT, COMPLETIONS, 30, pad_id=0)
    want_lp, want = logprobs_and_grads(policy, unshared(), chunk=4)
    got_lp, got = logprobs_and_grads(policy, shared, chunk=4)
    assert torch.allclose(got_lp, want_lp, atol=1e-5) and len(got) == len(want) == 28
    for name, g in want.items():  # float32 rounding, relative to the largest entry (a lost prompt gradient is not)
        assert g.norm() > 0, name
        assert (got[name] - g).abs().max() <= 1e-4 * g.abs().max(), name


def test_checkpointing_without_use_reentrant_counts_as_reentrant():
    model = random_model("qwen3")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={})  # torch's default: reentrant
    assert "reentrant" in share_prompt_reason(model)


def partitions(items):
    """Every partition of ``items`` into non-empty sets (brute force, for a handful of items)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in partitions(rest):
        for k in range(len(part)):
            yield part[:k] + [[first, *part[k]]] + part[k + 1 :]
        yield [[first], *part]


@pytest.mark.parametrize("seed", range(6))
def test_a_group_is_split_at_the_cheapest_point_a_brute_force_finds(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 8, (1,), generator=g))
    lengths = sorted(torch.randint(1, 48, (n,), generator=g).tolist(), reverse=True)
    prompt, budget = int(torch.randint(5, 80, (1,), generator=g)), int(torch.randint(60, 300, (1,), generator=g))

    def cost(run):  # padded completion tokens of a micro-batch plus its fixed cost; None when over the budget
        tokens = len(run) * max(lengths[k] for k in run)
        return None if prompt + tokens > budget and len(run) > 1 else tokens + MICRO_BATCH_TOKENS

    def total(split):  # the prompt runs once whatever the split (carried)
        costs = [cost(run) for run in split]
        return None if None in costs else prompt + sum(costs)

    best = min(t for p in partitions(list(range(n))) if (t := total(p)) is not None)
    runs = split_group(prompt, lengths, budget)
    assert sorted(k for run in runs for k in run) == list(range(n))
    assert total(runs) == best


def test_a_long_completion_among_short_ones_gets_a_micro_batch_of_its_own():
    # one truncated completion of 48 tokens and seven of 5-12 behind a 70-token prompt (the SmolLM2 job's shape)
    lengths = [48, 12, 10, 9, 8, 7, 6, 5]
    groups = pack_groups_by_token_budget([0] * 8, [70], lengths, 512)
    assert sorted(map(sorted, groups)) == [[0], [1, 2, 3, 4, 5, 6, 7]]
    padded = sum(70 + len(g) * max(lengths[i] for i in g) for g in groups)
    assert padded == (70 + 48) + (70 + 7 * 12) < 70 + 8 * 48  # 272 padded tokens instead of 454


@pytest.mark.parametrize("seed", range(6))
def test_the_largest_micro_batch_comes_first_and_a_split_groups_follow_each_other(seed):
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(2, 40, (4,), generator=g).tolist()
    row_prompt = sorted(torch.randint(0, 4, (14,), generator=g).tolist())
    lengths = torch.randint(1, 60, (14,), generator=g).tolist()
    groups = pack_groups_by_token_budget(row_prompt, prompts, lengths, 150)

    def cost(rows):
        used = {row_prompt[i] for i in rows}
        return len(used) * max(prompts[p] for p in used) + len(rows) * max(lengths[i] for i in rows)

    assert sorted(i for rows in groups for i in rows) == list(range(14))
    assert cost(groups[0]) == max(map(cost, groups))  # it runs before the first backward allocates the gradients
    alone = {p: [k for k, rows in enumerate(groups) if {row_prompt[i] for i in rows} == {p}] for p in range(4)}
    split = {p: ks for p, ks in alone.items() if len(ks) > 1}
    assert split  # these shapes split some group
    mbs = [
        collate_shared(rows, row_prompt, [[5] * n for n in prompts], [[7] * n for n in lengths], 0) for rows in groups
    ]
    assert carried_prompts(mbs) == {p: len(ks) for p, ks in split.items()}  # each split group's prompt runs once
    for ks in split.values():  # consecutive, the largest first
        assert ks == list(range(ks[0], ks[-1] + 1))
        assert [cost(groups[k]) for k in ks] == sorted((cost(groups[k]) for k in ks), reverse=True)


def test_the_bench_steps_group_runs_its_fifteen_row_micro_batch_first():
    # bench step --model qwen3-42m: one 20-token prompt x 16 completions of 512 tokens at token_budget 8192
    assert [len(rows) for rows in pack_groups_by_token_budget([0] * 16, [20], [512] * 16, 8192)] == [15, 1]


def test_a_prompt_cache_frees_its_kv_with_its_last_reference_not_at_a_garbage_collection():
    """A cache and its layer views form no reference cycle: the captured K/V die when the update drops the cache."""
    model = random_model("qwen3", torch.float32, seed=3)
    capture = PromptCapture(model.config.num_hidden_layers)
    model.model(input_ids=torch.tensor([[5, 9, 11]]), past_key_values=capture, use_cache=True)
    prefix = PromptPrefix(capture.kv, None, rows=2)
    out = model.model(input_ids=torch.tensor([[7], [8]]), past_key_values=prefix, use_cache=True,
                      position_ids=torch.tensor([[3], [3]]))  # fmt: skip
    keys = weakref.ref(capture.kv[0][0])
    gc.disable()
    try:
        del capture, prefix, out
        assert keys() is None
    finally:
        gc.enable()
