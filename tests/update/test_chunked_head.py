"""The chunked LM head computes the full-logits log-probs and gradients, in O(chunk x vocabulary) memory."""

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.data import PromptDataModule
from infgrpo.update import chunked_head, collate, completion_logprobs
from infgrpo.update.chunked_head import chunked_logprobs, chunked_logprobs_and_entropy
from infgrpo.update.logprobs import causal_lm_parts
from tests.helpers import ALLOW_SKIP_OFF, dequantized_reference, random_model, trained_4bit_lora, trainer, with_lora

PROMPTS = [[1, 5, 7, 9], [3, 4], [8, 9, 10, 11, 12], [6]]
COMPLETIONS = [[20, 21, 22], [30, 31, 32, 33, 34, 35, 36], [40], [50, 51, 52, 53]]  # 15 real positions


def logprobs_and_grads(model, mb, temperature, chunk):
    """Masked log-probs (n, C) and the gradients of a fixed weighted sum of them."""
    model.zero_grad(set_to_none=True)
    lp = completion_logprobs(model, mb, temperature, chunk) * mb.completion_mask
    weights = torch.randn(lp.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(lp.dtype)
    (lp * weights).sum().backward()
    return lp.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch,tied", [("qwen3", True), ("llama", False)])
@pytest.mark.parametrize("lora", [None, ["q_proj", "v_proj"], ["q_proj", "v_proj", "lm_head"]])
@pytest.mark.parametrize("chunk", [4, 10_000])  # 15 positions: 4 chunks, or one chunk larger than the micro-batch
def test_chunked_logprobs_and_gradients_equal_full_logits_float64(arch, tied, lora, chunk):
    model = random_model(arch, torch.float64, tie_word_embeddings=tied).train()
    if lora:
        model = with_lora(model, lora)
    mb = collate(list(range(4)), PROMPTS, COMPLETIONS, pad_id=0)  # rows of 1-7 completion tokens
    want, want_grads = logprobs_and_grads(model, mb, 0.7, chunk=0)
    got, got_grads = logprobs_and_grads(model, mb, 0.7, chunk=chunk)
    assert (got - want).abs().max() <= 1e-10
    assert want_grads.keys() == got_grads.keys() and len(want_grads) >= 4
    if lora and "lm_head" in lora:
        assert any("lm_head.lora_A" in k for k in got_grads) and any("lm_head.lora_B" in k for k in got_grads)
    if not lora:
        head = "lm_head.weight" if not tied else "model.embed_tokens.weight"
        assert head in got_grads and got_grads[head].abs().max() > 0
    for k, g in want_grads.items():
        assert g.abs().max() > 0, k
        assert (got_grads[k] - g).abs().max() <= 1e-10, k


def test_4bit_lora_chunked_gradients_match_a_dequantized_float64_reference(tokenizer, tmp_path):
    policy, base = trained_4bit_lora("qwen3", tokenizer, tmp_path / "base")
    ref = dequantized_reference(policy, base, lora_r=4).train()
    policy.train()
    mb = collate(list(range(4)), PROMPTS, COMPLETIONS, pad_id=0)
    want_lp, want = logprobs_and_grads(ref, mb, 0.8, chunk=0)  # float64, full logits
    got_lp, got = logprobs_and_grads(policy, mb, 0.8, chunk=4)  # 4-bit base, chunked head in float32
    assert len(want) == len(got) == 28
    assert torch.allclose(got_lp.double(), want_lp, atol=1e-5)
    for name, g in want.items():
        assert g.norm() > 0, name
        assert torch.allclose(got[name].double(), g, rtol=1e-4, atol=1e-6 * g.abs().max().item()), name


@ALLOW_SKIP_OFF
def test_one_training_step_gives_the_same_parameters_on_both_paths_float64(tmp_path):
    """The whole step: reference (beta) and old-policy (mu = 2) log-probs, loss and two optimizer steps."""
    params = []
    for chunk in (0, 5):
        torch.manual_seed(0)
        module = GRPOModule(
            policy={"dtype": "float64"},
            group_size=4,
            sampler=SamplerConfig(num_slots=4, max_new_tokens=16, temperature=0.9),
            objective={"beta": 0.04},
            update={"num_iterations": 2, "token_budget": 96, "logit_chunk_tokens": chunk},
            optimizer={"learning_rate": 1e-2},
        )
        before = {k: p.detach().clone() for k, p in module.policy.named_parameters()}
        trainer(tmp_path / str(chunk), 1, enable_checkpointing=False).fit(
            module, PromptDataModule(path="tiny", batch_size=2, eval_split=None)
        )
        params.append({k: p.detach().clone() for k, p in module.policy.named_parameters()})
    full, chunked = params
    assert sum(not torch.equal(full[k], before[k]) for k in full) >= len(full) // 2  # the step trained
    for k in full:
        assert (full[k] - chunked[k]).abs().max() <= 1e-10, k


class LargestTensor(TorchDispatchMode):
    """Records the largest new tensor (in elements) any operation returns; views and in-place results,
    which share an input's memory, are not new."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat = [*args, *(kwargs or {}).values()]
        inputs = {t.untyped_storage().data_ptr() for t in flat if isinstance(t, torch.Tensor)}
        for t in out if isinstance(out, tuple | list) else [out]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, t.numel())
        return out


def saved_bytes(model, run):
    """Bytes of the tensors autograd saves for the backward of ``run()``, the model's parameters excepted."""
    params = {p.data_ptr() for p in model.parameters()}
    saved = []

    def pack(t):
        if t.data_ptr() not in params:
            saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(saved)


def test_memory_is_bounded_by_the_chunk_not_by_the_tokens_times_the_vocabulary():
    vocab, chunk = 8192, 16
    rows = [[7 + (3 * i + j) % 90 for j in range(60 + 5 * i)] for i in range(4)]  # 4 rows, 60-75 tokens
    mb = collate(list(range(4)), [[1, 2, 3]] * 4, rows, pad_id=0)
    tokens = int(mb.completion_mask.sum())
    logits_f32 = tokens * vocab * 4  # float32 logits of the micro-batch's completion positions: 8.9 MiB
    model = with_lora(random_model("qwen3", torch.float32, vocab=vocab), ["q_proj", "v_proj"])
    # 1) what the forward saves for the backward, beyond the decoder's own activations (both paths run it); the
    # chunked head also keeps its last chunk's log p, at most chunk x V (test_the_backward_recomputes_every_chunk_...)
    decoder = causal_lm_parts(model)[0]
    layers = saved_bytes(model, lambda: decoder(input_ids=mb.input_ids, attention_mask=mb.attention_mask))
    full = saved_bytes(model, lambda: completion_logprobs(model, mb, 1.0, 0)) - layers
    chunked = saved_bytes(model, lambda: completion_logprobs(model, mb, 1.0, chunk)) - layers
    assert full >= logits_f32  # the full path keeps (at least) the float32 logits
    assert 0 < chunked < logits_f32 / 50  # hidden states of the completion positions and per-token scalars
    # 2) the largest tensor any operation makes, forward and backward
    for c, bound in ((0, None), (chunk, chunk * vocab)):
        model.zero_grad(set_to_none=True)
        with LargestTensor() as mode:
            completion_logprobs(model, mb, 1.0, c).sum().backward()
        if bound is None:
            assert mode.largest >= tokens * vocab
        else:
            assert mode.largest <= bound


def full_logits_entropy(model, mb, temperature):
    """Log-probs and entropies (N,) of the real completion positions from the model's own full logits."""
    c_len = mb.completion_ids.shape[1]
    logits = model(
        input_ids=mb.input_ids, attention_mask=mb.attention_mask, position_ids=mb.position_ids, use_cache=False
    ).logits[:, -c_len - 1 : -1]  # (n, C, V)
    real = mb.completion_mask.bool()
    logp_all = torch.log_softmax(logits[real] / temperature, dim=-1)  # (N, V)
    entropy = -(logp_all.exp() * logp_all).sum(-1)  # (N,): -sum_v p_v log p_v, written out
    return logp_all.gather(-1, mb.completion_ids[real][:, None]).squeeze(-1), entropy


def chunked_entropy(model, mb, temperature, chunk):
    """The same from the decoder's hidden states through :func:`chunked_logprobs_and_entropy`."""
    decoder, head = causal_lm_parts(model)
    c_len = mb.completion_ids.shape[1]
    hidden = decoder(
        input_ids=mb.input_ids, attention_mask=mb.attention_mask, position_ids=mb.position_ids, use_cache=False
    ).last_hidden_state
    real = mb.completion_mask.bool()
    h = hidden[:, -c_len - 1 : -1][real]  # (N, H)
    return chunked_logprobs_and_entropy(head, h, mb.completion_ids[real], temperature, chunk)


def entropy_grads(model, run, use):
    """(log-probs, entropies, gradients) of a fixed weighted sum of the log-probs and/or entropies."""
    model.zero_grad(set_to_none=True)
    lp, ent = run()
    g = torch.Generator().manual_seed(2)
    w_lp, w_ent = (torch.randn(lp.shape, generator=g, dtype=torch.float64).to(lp.dtype) for _ in range(2))
    loss = (lp * w_lp).sum() * ("logp" in use) + (ent * w_ent).sum() * ("entropy" in use)
    loss.backward()
    return lp.detach(), ent.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch,tied", [("qwen3", True), ("llama", False)])
@pytest.mark.parametrize("lora", [None, ["q_proj", "v_proj", "lm_head"]])
@pytest.mark.parametrize("chunk", [4, 10_000])
@pytest.mark.parametrize("use", [("logp", "entropy"), ("entropy",), ("logp",)])
def test_chunked_entropy_and_its_gradient_equal_full_logits_float64(arch, tied, lora, chunk, use):
    model = random_model(arch, torch.float64, tie_word_embeddings=tied).train()
    if lora:
        model = with_lora(model, lora)
    mb = collate(list(range(4)), PROMPTS, COMPLETIONS, pad_id=0)
    want_lp, want_ent, want = entropy_grads(model, lambda: full_logits_entropy(model, mb, 0.7), use)
    got_lp, got_ent, got = entropy_grads(model, lambda: chunked_entropy(model, mb, 0.7, chunk), use)
    assert want_ent.shape == (15,) and want_ent.min() > 0.1  # a random model: broad distributions
    assert (got_ent - want_ent).abs().max() <= 1e-10 and (got_lp - want_lp).abs().max() <= 1e-10
    assert want.keys() == got.keys() and len(want) >= 4
    if lora:
        assert any("lm_head.lora_B" in k for k in got)
    for k, g in want.items():
        assert g.abs().max() > 0, k
        assert (got[k] - g).abs().max() <= 1e-10 * max(1.0, g.abs().max().item()), k


def test_chunked_entropy_passes_gradcheck_and_is_minus_sum_p_log_p_on_a_bare_linear_head():
    g = torch.Generator().manual_seed(3)
    w = torch.randn(11, 6, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(11, generator=g, dtype=torch.float64, requires_grad=True)
    h = torch.randn(7, 6, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (7,), generator=g)

    def head_at(w, b):
        lin = torch.nn.Linear(6, 11).double()
        lin.weight, lin.bias = torch.nn.Parameter(w), torch.nn.Parameter(b)
        return lin

    def f(x, w, b):  # log-probs and entropies of 7 positions in chunks of 3 (the last chunk is short)
        return chunked_logprobs_and_entropy(head_at(w, b), x, targets, 0.8, 3)

    assert torch.autograd.gradcheck(lambda x: f(x, w, b), (h,))
    p = torch.softmax((h.detach() @ w.detach().t() + b.detach()) / 0.8, -1)
    assert torch.allclose(f(h, w, b)[1], -(p * p.log()).sum(-1), atol=1e-13)


def test_entropy_memory_is_bounded_by_the_chunk_not_by_the_tokens_times_the_vocabulary():
    vocab, chunk = 8192, 16
    rows = [[7 + (3 * i + j) % 90 for j in range(60 + 5 * i)] for i in range(4)]
    mb = collate(list(range(4)), [[1, 2, 3]] * 4, rows, pad_id=0)
    tokens = int(mb.completion_mask.sum())
    model = with_lora(random_model("qwen3", torch.float32, vocab=vocab), ["q_proj", "v_proj", "lm_head"])
    decoder, head = causal_lm_parts(model)
    with torch.no_grad():
        hidden = decoder(input_ids=mb.input_ids, attention_mask=mb.attention_mask).last_hidden_state
    real = mb.completion_mask.bool()
    h = hidden[:, -mb.completion_ids.shape[1] - 1 : -1][real].clone().requires_grad_()  # (N, H), a leaf
    targets = mb.completion_ids[real]

    def chunked():
        lp, ent = chunked_logprobs_and_entropy(head, h, targets, 1.0, chunk)
        return lp.sum() + ent.sum()

    def full():
        logp = torch.log_softmax(head(h).float(), dim=-1)  # (N, V)
        return logp.gather(-1, targets[:, None]).sum() - (logp.exp() * logp).sum()

    logits_f32 = tokens * vocab * 4
    assert saved_bytes(model, full) >= logits_f32
    assert 0 < saved_bytes(model, chunked) < logits_f32 / 50  # h, the LoRA input and per-token scalars
    for run, bound in ((full, None), (chunked, chunk * vocab)):
        model.zero_grad(set_to_none=True)
        h.grad = None
        with LargestTensor() as mode:
            run().backward()  # the entropy's gradient goes through the chunked backward too
        assert h.grad is not None and h.grad.abs().max() > 0
        if bound is None:
            assert mode.largest >= tokens * vocab
        else:
            assert mode.largest <= bound


def test_the_full_logits_entropy_carries_a_gradient_only_when_asked():
    model = random_model("qwen3", torch.float64).train()
    mb = collate(list(range(4)), PROMPTS, COMPLETIONS, pad_id=0)
    lp, ent = completion_logprobs(model, mb, 0.7, 0, entropy=True)
    lp_g, ent_g = completion_logprobs(model, mb, 0.7, 0, entropy=True, entropy_grad=True)
    assert lp.requires_grad and not ent.requires_grad  # the metric costs no (rows x C x V) autograd state
    assert ent_g.requires_grad and torch.equal(ent, ent_g.detach()) and torch.equal(lp, lp_g)


def test_the_backward_recomputes_every_chunk_but_the_last_and_a_second_backward_recomputes_all(monkeypatch):
    g = torch.Generator().manual_seed(5)
    lin = torch.nn.Linear(6, 11).double()
    h = torch.randn(7, 6, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (7,), generator=g)
    weights = torch.randn(7, generator=g, dtype=torch.float64)
    calls, kept_alive = [], []
    real_logits = chunked_head._logits

    def logits(*a):
        calls.append(a[-2])
        kept_alive.append(kept_ref is not None and kept_ref() is not None)
        return real_logits(*a)

    kept_ref = None
    monkeypatch.setattr(chunked_head, "_logits", logits)
    lp = chunked_logprobs(lin, h, targets, 0.8, 3)  # chunks at 0, 3, 6
    assert calls == [0, 3, 6]
    kept_start, kept = lp.grad_fn.kept
    assert kept_start == 6 and kept.shape == (1, 11)  # the last chunk's log p, all the forward leaves
    kept_ref = weakref.ref(kept)
    del kept
    (lp * weights).sum().backward(retain_graph=True)
    assert calls == [0, 3, 6, 0, 3]  # the last chunk came from the forward
    assert kept_alive[3:] == [False, False] and kept_ref() is None  # and was freed before any recomputation
    want = torch.autograd.grad((torch.log_softmax(lin(h) / 0.8, -1)[torch.arange(7), targets] * weights).sum(), h)[0]
    assert (h.grad - want).abs().max() <= 1e-13
    (lp * weights).sum().backward()  # the kept buffer was used up: every chunk again
    assert calls == [0, 3, 6, 0, 3, 0, 3, 6]
    assert (h.grad - 2 * want).abs().max() <= 1e-13


class NewTensors(TorchDispatchMode):
    """Records the shape of every new tensor an operation returns (views and in-place results are not new)."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat = [*args, *(kwargs or {}).values()]
        inputs = {t.untyped_storage().data_ptr() for t in flat if isinstance(t, torch.Tensor)}
        for t in out if isinstance(out, tuple | list) else [out]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.shapes.append(tuple(t.shape))
        return out


@pytest.mark.parametrize("lora", [False, True])  # a trainable head; a frozen one with a LoRA term
def test_the_head_makes_one_chunk_of_logits_at_a_time_and_accumulates_its_weight_gradient_in_place(monkeypatch, lora):
    vocab, hidden, chunk, rows = 8192, 64, 16, 4
    monkeypatch.setattr(chunked_head, "REDUCE_BYTES", rows * vocab * 4)  # the reductions: 4 rows at a time
    model = random_model("qwen3", torch.float32, vocab=vocab, tie_word_embeddings=False)
    model = with_lora(model, ["lm_head"]) if lora else model.train()
    head = causal_lm_parts(model)[1]
    g = torch.Generator().manual_seed(4)
    h = torch.randn(40, hidden, generator=g, requires_grad=True)  # chunks of 16, 16 and 8 positions
    targets = torch.randint(0, vocab, (40,), generator=g)
    with NewTensors() as forward:
        lp, ent = chunked_logprobs_and_entropy(head, h, targets, 0.8, chunk)
    with NewTensors() as backward:
        lp.sum().backward()  # the policy loss's gradient (an entropy bonus adds a (chunk, V) buffer: p)
    per_token = [s[0] for s in forward.shapes if len(s) == 2 and s[1] == vocab]  # (rows, V) tensors: their rows
    assert [r for r in per_token if r > rows] == [16, 16, 8]  # each chunk's logits, nothing else of that size
    assert len(per_token) > 3 and max(r for r in per_token if r <= rows) == rows  # the reductions' temporaries
    recomputed = [s[0] for s in backward.shapes if len(s) == 2 and s[1] == vocab and s[0] > rows]
    assert recomputed == [16, 16]  # the first two chunks; the last one's log p came from the forward
    weight_grads = [s for s in backward.shapes if s == (vocab, hidden)]
    assert weight_grads == ([] if lora else [(vocab, hidden)])  # the gradient itself, no per-chunk (V, H) product
    trained = [p for n, p in model.named_parameters() if ("lora_B" in n if lora else n == "lm_head.weight")]
    assert len(trained) == 1 and trained[0].grad.abs().max() > 0


def test_reductions_by_row_blocks_give_the_full_logits_logprobs_entropies_and_gradients_float64(monkeypatch):
    model = with_lora(random_model("qwen3", torch.float64), ["q_proj", "v_proj", "lm_head"])
    mb = collate(list(range(4)), PROMPTS, COMPLETIONS, pad_id=0)
    want_lp, want_ent, want = entropy_grads(model, lambda: full_logits_entropy(model, mb, 0.7), ("logp", "entropy"))
    monkeypatch.setattr(chunked_head, "REDUCE_BYTES", 3 * 103 * 8)  # 3 rows of a chunk at a time
    assert chunked_head._reduce_rows(torch.empty(5, 103, dtype=torch.float64)) == 3
    assert chunked_head._reduce_rows(torch.empty(5, 103, device="meta")) == 5  # off CPU: the whole chunk
    got_lp, got_ent, got = entropy_grads(model, lambda: chunked_entropy(model, mb, 0.7, 5), ("logp", "entropy"))
    assert (got_ent - want_ent).abs().max() <= 1e-10 and (got_lp - want_lp).abs().max() <= 1e-10
    assert want.keys() == got.keys() and len(want) >= 4
    for k, g in want.items():
        assert (got[k] - g).abs().max() <= 1e-10 * max(1.0, g.abs().max().item()), k
