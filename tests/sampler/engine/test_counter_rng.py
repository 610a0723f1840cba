"""Counter-based random numbers: defined arithmetic, uniform, independent of slot, batch and schedule."""

import random

import torch

from infgrpo.sampler.engine.counter_rng import MASK32, MUL1, MUL2, counter_bits, counter_uniform, mix32, stream_key


def mix32_int(x: int) -> int:
    """The module docstring's finalizer on one Python integer: the reference the tensor version must equal."""
    x ^= x >> 16
    x = (x * MUL1) & MASK32
    x ^= x >> 15
    x = (x * MUL2) & MASK32
    return x ^ (x >> 15)


def counter_uniform_int(k0: int, k1: int, t: int, dtype: torch.dtype = torch.float64) -> float:
    """``counter_uniform`` for one element, in plain Python integers (32 bits for float64, else 24)."""
    bits = mix32_int(mix32_int(t ^ k0) ^ k1)
    return bits * 2.0**-32 if dtype == torch.float64 else (bits >> 8) * 2.0**-24


def chi_square_p_value(counts: torch.Tensor) -> float:
    """P-value of Pearson's chi-square test of ``counts`` against equal cell probabilities."""
    counts = counts.double().flatten()
    expected = counts.sum() / counts.numel()
    stat = ((counts - expected) ** 2 / expected).sum()
    df = counts.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), stat / 2))


def test_tensor_hash_equals_plain_integer_arithmetic_at_the_extremes():
    rng = random.Random(0)
    xs = [0, 1, MASK32, MASK32 - 1, 2**31, 2**31 - 1] + [rng.getrandbits(32) for _ in range(2000)]
    got = mix32(torch.tensor(xs)).tolist()
    assert got == [mix32_int(x) for x in xs]
    assert all(0 <= g <= MASK32 for g in got)
    keys = [stream_key(rng.getrandbits(63), rng.randrange(10**6), rng.randrange(4096)) for _ in range(500)]
    t = [rng.randrange(2**20) for _ in keys]
    k0, k1 = torch.tensor([k[0] for k in keys]), torch.tensor([k[1] for k in keys])
    for dtype in (torch.float64, torch.float32):
        u = counter_uniform(k0, k1, torch.tensor(t), dtype)
        assert u.dtype == dtype
        assert u.tolist() == [counter_uniform_int(a, b, c, dtype) for (a, b), c in zip(keys, t, strict=True)]


def test_mix32_is_a_bijection_on_a_slice_of_words():
    x = torch.arange(0, 2**20) * 4099 % (2**32)  # 2^20 distinct words spread over the range
    assert mix32(x).unique().numel() == x.numel()


def test_uniforms_are_uniform_within_a_stream_and_across_streams():
    # 512 streams (sequences) x 512 token positions = 262,144 draws in 256 bins
    keys = [stream_key(7, p, j) for p in range(8) for j in range(64)]
    k0 = torch.tensor([k[0] for k in keys]).repeat_interleave(512)
    k1 = torch.tensor([k[1] for k in keys]).repeat_interleave(512)
    t = torch.arange(512).repeat(len(keys))
    u = counter_uniform(k0, k1, t, torch.float64)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert chi_square_p_value(torch.bincount((u * 256).long(), minlength=256)) > 1e-3
    # pairs of consecutive tokens of a stream: no serial structure (16 x 16 joint bins)
    v = u.view(len(keys), 512)
    pairs = (v[:, :-1] * 16).long() * 16 + (v[:, 1:] * 16).long()
    assert chi_square_p_value(torch.bincount(pairs.flatten(), minlength=256)) > 1e-3
    # the same position in different streams: no structure across sequences either
    cross = (v[:-1, :] * 16).long() * 16 + (v[1:, :] * 16).long()
    assert chi_square_p_value(torch.bincount(cross.flatten(), minlength=256)) > 1e-3


def test_a_draw_depends_only_on_its_key_and_position_not_on_its_row_or_batch():
    keys = torch.tensor([stream_key(3, p, j) for p in range(4) for j in range(5)])  # (20, 2)
    t = torch.arange(20) % 7
    full = counter_bits(keys[:, 0], keys[:, 1], t)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(0))
    assert torch.equal(counter_bits(keys[perm, 0], keys[perm, 1], t[perm]), full[perm])  # other rows, other batch
    for i in (0, 7, 19):  # alone
        assert torch.equal(counter_bits(keys[i : i + 1, 0], keys[i : i + 1, 1], t[i : i + 1]), full[i : i + 1])


def test_keys_differ_between_seeds_prompts_and_samples():
    keys = {stream_key(s, p, j) for s in range(3) for p in range(20) for j in range(50)}
    assert len(keys) == 3 * 20 * 50
    assert all(0 <= k0 <= MASK32 and 0 <= k1 < 2**31 for k0, k1 in keys)
