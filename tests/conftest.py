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


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` are skipped where CUDA is not available (CI), and run on a lent GPU."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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
