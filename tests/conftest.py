import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

from infgrpo.policy.load import load_policy, load_tokenizer  # noqa: E402

# 1 thread a process under pytest-xdist (the README's `-n 2`: two workers share the cores; more threads than cores
# collapse torch's thread pool), else 2; INFGRPO_TEST_THREADS=1 on a shared, busy machine
XDIST = "PYTEST_XDIST_WORKER" in os.environ
torch.set_num_threads(int(os.environ.get("INFGRPO_TEST_THREADS", "1" if XDIST else "2")))


LONGEST_FIRST = (
    "tests/bench/test_learn_bench.py",  # the two-trainer learn bench, ~105 s (.ci/run at 625f0c2, 2 workers)
    "tests/test_sharded.py",  # the FSDP2 references (a module fixture), ~102 s
    "tests/test_docs.py",  # the docs build, ~75 s
    "tests/test_interruption.py",  # a signalled run and its resume, ~59 s
    "tests/bench/test_paper_bench.py",  # ~49 s + 25 s
    "tests/test_distributed.py",  # the DDP references (a module fixture), ~48 s
    "tests/bench/test_rollout_bench.py",  # ~43 s
)
"""The files of the suite's longest tests, longest first: started first, so that no long test is the last one left."""


@pytest.hookimpl(trylast=True)  # after tutorials/conftest.py has marked the notebooks slow
def pytest_collection_modifyitems(config, items):
    """Runs the longest files first, then every other file that holds a slow test (the notebooks too), then the rest,
    each file's tests together and in their order, so a worker keeps a module's fixtures and ``--dist worksteal``
    (pyproject's addopts) ends the run on short tests. Tests marked ``gpu`` are skipped where CUDA is not available
    (CI), and run on a lent GPU."""
    files = [item.nodeid.split("::")[0] for item in items]
    slow = {file: len(LONGEST_FIRST) for file, item in zip(files, items, strict=True) if "slow" in item.keywords}
    order = slow | {file: rank for rank, file in enumerate(LONGEST_FIRST)}
    ranked = sorted(range(len(items)), key=lambda i: (order.get(files[i], len(LONGEST_FIRST) + 1), i))
    items[:] = [items[i] for i in ranked]
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def no_global_seed(monkeypatch):
    """Each test starts without a run seed: ``seed_everything`` keeps one in ``PL_GLOBAL_SEED``, which the settings
    left null follow (the data order, the rollouts), so one test's seed would move the next test's data."""
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)


@pytest.fixture(scope="session")
def tokenizer():
    return load_tokenizer("tiny")


@pytest.fixture(scope="session")
def tiny_model():
    return load_policy("tiny").eval()


@pytest.fixture
def prompts(tokenizer):
    from infgrpo.data.datamodule import encode_prompt

    return [encode_prompt(tokenizer, p, None, True) for p in ("rev abcdefg", "count 3 9", "dup ab")]


@pytest.fixture(scope="session")
def random_vlm_folder(tmp_path_factory):
    """``folder(family)``: the folder of a tiny random vision-language model of a recipe family (Qwen2-VL, Qwen3-VL:
    no shipped model covers them), built once a session (tests/vision/random_vlms.py)."""
    from tests.vision.random_vlms import build_random_vlm

    built: dict[str, str] = {}

    def folder(family: str) -> str:
        if family not in built:
            built[family] = str(build_random_vlm(family, tmp_path_factory.mktemp(family)))
        return built[family]

    return folder
