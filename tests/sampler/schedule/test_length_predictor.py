"""LengthPredictor: ridge head against a float64 least-squares reference, history, checkpoints."""

import hashlib
import io
import math
import struct

import pytest
import torch

from infgrpo import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.schedule.length_predictor import LengthPredictor, pool_over_ranks, prompt_features, prompt_key
from infgrpo.sampler.schedule.schedule_metrics import prediction_errors, spearman


def fake_batches(n_batches, prompts=8, d=48, seed=0):
    """Features whose direction determines log-length exactly: y = 3 + x . beta / |x|."""
    gen = torch.Generator().manual_seed(seed)
    beta = torch.randn(d, generator=gen, dtype=torch.float64)
    beta = beta / beta.norm()
    out = []
    for b in range(n_batches):
        x = torch.randn(prompts, d, generator=gen, dtype=torch.float64)
        y = 3.0 + (x / x.norm(dim=1, keepdim=True)) @ beta
        keys = [prompt_key([seed, b, i]) for i in range(prompts)]
        out.append((keys, x.float(), [[round(math.exp(v))] * 4 for v in y.tolist()]))
    return out


def test_cold_start_predicts_equal_lengths():
    pred = LengthPredictor("learned", max_length=100)
    assert pred.predict(["a", "b"], torch.randn(2, 8)) == [50.0, 50.0]


def test_ridge_head_equals_a_float64_weighted_least_squares_fit():
    pred = LengthPredictor("learned", max_length=4096, dim=16, ridge=0.5, decay=0.8)
    rows, targets, weights = [], [], []
    batches = fake_batches(5, d=40)
    for age, (keys, x, lengths) in enumerate(batches):
        pred.update(keys, x, lengths)
        rows.append(pred.design(x))
        targets.append(torch.tensor([math.log(g[0]) for g in lengths], dtype=torch.float64))
        weights.append(torch.full((len(keys),), 0.8 ** (len(batches) - 1 - age), dtype=torch.float64))
    X, y, w = torch.cat(rows), torch.cat(targets), torch.cat(weights)
    # independent reference: weighted least squares with the ridge as extra rows (bias not penalized)
    k = X.shape[1]
    penalty = torch.eye(k, dtype=torch.float64)[:-1] * math.sqrt(0.5)
    A = torch.cat([X * w.sqrt()[:, None], penalty])
    rhs = torch.cat([y * w.sqrt(), torch.zeros(k - 1, dtype=torch.float64)])
    ref = torch.linalg.lstsq(A, rhs[:, None]).solution[:, 0]
    torch.testing.assert_close(pred.weights(), ref, rtol=1e-6, atol=1e-6)


def test_learned_head_ranks_unseen_prompts():
    pred = LengthPredictor("learned", max_length=4096, dim=64, ridge=0.1, decay=1.0, min_rows=16)
    for keys, x, lengths in fake_batches(20, d=48):
        pred.update(keys, x, lengths)
    keys, x, lengths = fake_batches(1, prompts=64, d=48, seed=0)[0]  # same beta, new prompts
    keys = [k + "-new" for k in keys]
    truth = [g[0] for g in lengths]
    assert spearman(pred.predict(keys, x), truth) > 0.9


def test_head_is_trusted_after_min_rows_prompts_even_one_per_rollout():
    # with decay 0.9 and one prompt per rollout the decayed count levels off at 10 < min_rows
    pred = LengthPredictor("learned", max_length=4096, dim=64, ridge=0.1, decay=0.9, min_rows=16)
    for keys, x, lengths in fake_batches(15, prompts=1, d=48):
        pred.update(keys, x, lengths)
    unseen, features, _ = fake_batches(1, prompts=8, d=48, seed=1)[0]
    assert len(set(pred.predict(unseen, features))) == 1  # 15 prompts: the running mean for every one
    for keys, x, lengths in fake_batches(40, prompts=1, d=48)[15:]:
        pred.update(keys, x, lengths)
    assert pred.seen == 40 and pred.rows < 10
    assert len(set(pred.predict(unseen, features))) == 8  # the head now tells unseen prompts apart


def test_history_learns_a_prompts_own_length():
    pred = LengthPredictor("history", max_length=500)
    for _ in range(6):
        pred.update(["short", "long"], None, [[10, 12, 14], [300, 280, 320]])
    short, long = pred.predict(["short", "long"])
    # history weighs 4, the running mean (geometric mean of 12 and 300) weighs 1
    mean = math.log(12 * 300) / 2
    assert short == pytest.approx(math.exp((4 * math.log(12) + mean) / 5))
    assert long == pytest.approx(math.exp((4 * math.log(300) + mean) / 5))
    assert pred.predict(["unseen"]) == [pytest.approx(math.exp(mean))]


def test_history_forgets_the_least_recently_seen_prompt():
    pred = LengthPredictor("history", max_length=100, max_history=2)
    for key in ("a", "b", "a", "c"):
        pred.update([key], None, [[5]])
    assert list(pred.history) == ["a", "c"]


def test_state_round_trips_through_a_checkpoint_file():
    pred = LengthPredictor("learned", max_length=4096, dim=16)
    for keys, x, lengths in fake_batches(3):
        pred.update(keys, x, lengths)
    buf = io.BytesIO()
    torch.save(pred.state_dict(), buf)
    buf.seek(0)
    restored = LengthPredictor("learned", max_length=4096, dim=16)
    restored.load_state_dict(torch.load(buf, weights_only=True))
    keys, x, _ = fake_batches(1, seed=7)[0]
    assert restored.predict(keys, x) == pred.predict(keys, x)
    # and both keep learning identically
    for p in (pred, restored):
        p.update(keys, x, [[9]] * len(keys))
    assert restored.predict(keys, x) == pred.predict(keys, x)


def test_prompt_features_ignore_padding(tiny_model, prompts):
    batched = prompt_features(tiny_model, prompts)
    alone = torch.cat([prompt_features(tiny_model, [p]) for p in prompts])
    assert batched.shape == (len(prompts), tiny_model.config.hidden_size)
    torch.testing.assert_close(batched, alone, rtol=1e-4, atol=1e-4)


def test_prompt_key_is_stable_and_distinguishes_prompts():
    assert prompt_key([1, 2, 3]) == prompt_key([1, 2, 3]) != prompt_key([1, 2, 4])
    want = hashlib.blake2b(struct.pack("<3i", 1, 2, 3), digest_size=8).hexdigest()
    assert prompt_key([1, 2, 3]) == want


def test_sampler_reports_predictions_and_learns(tiny_model, tokenizer, prompts):
    sampler = MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(num_slots=4, max_new_tokens=40))
    first = sampler.sample(prompts, 4, seed=0)
    assert first.stats["predicted_lengths"] == [20.0] * 12  # cold start: max_new_tokens / 2
    assert sampler.predictor.rows == 3
    second = sampler.sample(prompts, 4, seed=1)
    errs = prediction_errors(second.stats["predicted_lengths"], second.lengths)
    assert second.stats["length_mae"] == pytest.approx(errs["length_mae"])
    assert second.stats["predicted_lengths"] != first.stats["predicted_lengths"]
    assert 0.0 <= second.stats["bubble_fraction"] < 1.0
    assert second.stats["decode_steps"] >= second.stats["lower_bound_steps"] > 0
    sampler.generate_one(prompts)  # evaluation does not train the predictor
    assert sampler.predictor.rows == pytest.approx(3 * 0.9 + 3)


def test_spearman_and_errors_by_hand():
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) == 0.0
    e = prediction_errors([10.0, 20.0], [10, 30])
    assert e == {"length_mae": 5.0, "length_spearman": pytest.approx(1.0), "length_within_20pct": 0.5}


def test_pooled_update_over_ranks_equals_one_process_with_the_whole_batch():
    """Two ranks with 4 prompts each learn what one process with all 8 learns (in rank order)."""
    keys, x, lengths = fake_batches(1, prompts=8)[0]
    single = LengthPredictor("learned", max_length=4096, dim=16)
    single.update(keys, x, lengths)
    ranks = [LengthPredictor("learned", max_length=4096, dim=16) for _ in range(2)]
    shards = [(keys[:4], x[:4], lengths[:4]), (keys[4:], x[4:], lengths[4:])]
    # a fake all-gather over two in-process "ranks": rank r's update is the r-th shard's delta
    deltas = []
    for pred, (k, f, g) in zip(ranks, shards, strict=True):
        pred.sync = lambda d: deltas.append(d) or d  # record the local delta only
        pred.update(k, f, g)
    for r, pred in enumerate(ranks):
        pred.__init__("learned", max_length=4096, dim=16)  # start over, now pooling for real
        calls = iter(range(10))

        def gather(t, r=r, calls=calls):
            i = next(calls)
            local = [_delta_tensor(d, i) for d in deltas]
            return torch.cat([t if j == r else local[j] for j in range(2)])

        pred.sync = pool_over_ranks(gather)
        pred.update(*shards[r])
    for pred in ranks:
        assert list(pred.history) == list(single.history) and pred.history == single.history
        torch.testing.assert_close(pred.A, single.A, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(pred.b, single.b, rtol=1e-12, atol=1e-12)
        assert pred.rows == single.rows and pred.y_sum == pytest.approx(single.y_sum, rel=1e-12)
    assert ranks[0].history == ranks[1].history and torch.equal(ranks[0].A, ranks[1].A)


def _delta_tensor(delta, call):
    """What rank j's ``pool_over_ranks`` passes to gather on its ``call``-th call."""
    if call == 0:
        return torch.tensor([int(k, 16) - 2**63 for k in delta["keys"]], dtype=torch.int64)
    if call == 1:
        return torch.tensor(delta["y"], dtype=torch.float64)
    return delta["A" if call == 2 else "b"][None]
