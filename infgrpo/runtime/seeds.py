"""Seeds derived from integers: the rollout seed of a step, a rank's dropout seed, a sequence's stream key.

derive_seed(seed, rollout_index)        # the same on every rank and every machine
run_seed(None)                          # the run's seed_everything (PL_GLOBAL_SEED), else 0
"""

from __future__ import annotations

import hashlib
import os


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers (BLAKE2b of their decimal forms), stable across processes and platforms."""
    digest = hashlib.blake2b(",".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def run_seed(seed: int | None) -> int:
    """``seed`` when given; else the run's global seed (``seed_everything``, which Lightning keeps in the
    ``PL_GLOBAL_SEED`` environment variable), else 0: one seed moves everything, as TRL's ``seed`` does."""
    if seed is not None:
        return seed
    return int(os.environ.get("PL_GLOBAL_SEED", 0))
