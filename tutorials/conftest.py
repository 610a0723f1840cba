"""`pytest --nbmake` runs the tutorials shrunk.

Each notebook's parameter cell (tagged ``parameters``) reads ``INFGRPO_TUTORIAL_SMOKE``: "1" selects
small values that only check the code paths, anything else the full values the committed outputs
come from. pytest imports this file before it starts any notebook kernel, and kernels inherit this
process's environment, so the tutorials run shrunk under pytest unless the variable is already set
(``INFGRPO_TUTORIAL_SMOKE=0 pytest tutorials/`` runs them in full). Every notebook is marked ``slow`` (each
starts a kernel and trains), so ``pytest -m "not slow"`` leaves them out.
"""

import os
from pathlib import Path

import pytest

os.environ.setdefault("INFGRPO_TUTORIAL_SMOKE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "PYTEST_XDIST_WORKER" in os.environ:  # two workers share the cores: one torch thread a notebook kernel
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks the notebooks of this folder ``slow``."""
    here = Path(__file__).resolve().parent
    for item in items:
        if item.path.suffix == ".ipynb" and item.path.resolve().parent == here:
            item.add_marker(pytest.mark.slow)
