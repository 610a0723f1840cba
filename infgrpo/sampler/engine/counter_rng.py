"""Counter-based random numbers: a uniform from (stream key, token index), for all rows in one pass.

Schedule invariance needs each sequence's t-th token to use a random number that depends only on
(seed, global prompt index, sample index, t): never on the slot, the round or the neighbours. One
``torch.Generator`` per sequence gave that, at the price of one random-number kernel per sequence
per step. Here the number is a pure function instead, computed for every row of the pool at once:

1. A 64-bit **stream key** per sequence, on the host, once: ``derive_seed(seed, prompt, sample)``
   (BLAKE2b of the three integers), split into two 32-bit words ``k0`` (low) and ``k1`` (high, 31 bits).
2. Per token, on the device: ``x = mix32(mix32(t ^ k0) ^ k1)`` with ``t`` the token's index in its
   completion (0 = the first token, sampled from the prompt's prefill), and
   ``mix32`` a 32-bit integer finalizer (xor-shift / multiply, the shape of Wellons' *lowbias32*):
   ``x ^= x >> 16; x *= 0x21f0aaad; x ^= x >> 15; x *= 0x735a2d97; x ^= x >> 15`` (mod 2^32).
   It is a bijection of 32-bit words with full avalanche, so consecutive counters give unrelated
   outputs, and two streams differ whenever their keys do.
3. ``u = x / 2^32`` in float64, or ``(x >> 8) / 2^24`` in float32 and narrower: exact, in [0, 1).

All arithmetic is on int64 tensors holding values below 2^32, with both multipliers below 2^31,
so no product reaches 2^63: the result is defined, and identical on every device and platform (a
test checks the device function against a plain-integer reference of its own). 10 elementwise operators per
``mix32``, about 25 a step for every row together; under a CUDA graph they are one captured
sequence of kernels.
"""

from __future__ import annotations

import torch

from infgrpo.runtime.seeds import derive_seed

MASK32 = 0xFFFFFFFF
MUL1, MUL2 = 0x21F0AAAD, 0x735A2D97  # odd, < 2**31: x * MUL < 2**63 for any 32-bit x


def mix32(x: torch.Tensor) -> torch.Tensor:
    """The 32-bit finalizer of the module docstring, elementwise on an int64 tensor of values in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = (x * MUL1) & MASK32
    x = x ^ (x >> 15)
    x = (x * MUL2) & MASK32
    return x ^ (x >> 15)


def stream_key(seed: int, prompt: int, sample: int) -> tuple[int, int]:
    """The two 32-bit key words (k0, k1) of sequence ``sample`` of global prompt ``prompt`` under ``seed``."""
    key = derive_seed(seed, prompt, sample)
    return key & MASK32, key >> 32


def counter_bits(k0: torch.Tensor, k1: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """32 random bits (int64 in [0, 2^32)) per element of the key words and token indices (same shapes)."""
    return mix32(mix32(t ^ k0) ^ k1)


def counter_uniform(k0: torch.Tensor, k1: torch.Tensor, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A uniform in [0, 1) per element, in ``dtype``: 32 bits for float64, 24 bits (exact) for narrower floats."""
    bits = counter_bits(k0, k1, t)
    if dtype == torch.float64:
        return bits.to(torch.float64) * 2.0**-32
    return (bits >> 8).to(dtype) * 2.0**-24
