"""Seeds derived from integers: the rollout seed of a step, a rank's dropout seed, a sequence's stream key.

derive_seed(seed, rollout_index)        # the same on every rank and every machine
"""

from __future__ import annotations

import hashlib


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers (BLAKE2b of their decimal forms), stable across processes and platforms."""
    digest = hashlib.blake2b(",".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)
