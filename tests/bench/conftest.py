import json

import pytest
import torch

from benchmarks.harness import apply_threads
from infgrpo.runtime import threads


@pytest.fixture
def children_here(monkeypatch):
    """``children_here(module, run_one)``: the benchmark ``module``'s ``spawn_all`` runs each child in this process.

    Each configuration goes through JSON, as to a child, and the child's ``--threads`` is applied (this
    process's thread policy is restored when the test ends); one that carries ``skipped`` is kept as it
    is. A fresh process a child costs only imports in a test (about 10 s each on a busy 2-core machine);
    the fresh process itself, the time box and a failing child's row are the harness's, tested in
    tests/bench/test_harness.py and by the benchmarks whose tests still spawn.
    """
    torch_threads = torch.get_num_threads()
    monkeypatch.setattr(threads, "_GOVERNOR", threads._GOVERNOR)  # put back at teardown

    def here(run_one):
        def spawn_all(name: str, configs: list[dict], timeout=None, deadline=None) -> list[dict]:
            return [cfg if "skipped" in cfg else child(json.loads(json.dumps(cfg))) for cfg in configs]

        def child(cfg: dict) -> dict:
            apply_threads(cfg.get("threads"))
            return run_one(cfg)

        return spawn_all

    yield lambda module, run_one: monkeypatch.setattr(module, "spawn_all", here(run_one))
    torch.set_num_threads(torch_threads)
