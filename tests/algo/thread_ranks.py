"""Data-parallel ranks as threads of one process: a real all_gather (every rank waits for all), for tests."""

import threading

import torch

from infgrpo.runtime.ranks import Ranks


def run_ranks(world, fn):
    """Runs ``fn(ranks, rank)`` on ``world`` threads whose all_gather stacks every thread's tensor."""
    slots, barrier, results = [None] * world, threading.Barrier(world, timeout=30), [None] * world

    def gather_for(rank):
        def all_gather(x):
            slots[rank] = x.clone()
            barrier.wait()
            out = torch.stack(list(slots))
            barrier.wait()
            return out

        return all_gather

    errors = []

    def worker(rank):
        try:
            results[rank] = fn(Ranks(world, rank, gather_for(rank)), rank)
        except BaseException as err:  # re-raised in the test's thread
            errors.append(err)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    return results
