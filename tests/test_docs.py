"""The documentation site builds from the checkout with every warning an error and every reference resolved."""

import os
import re
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest

from infgrpo.training.hparams import GROUPS

pytestmark = pytest.mark.slow  # builds the docs site in a process of its own; `pytest -m "not slow"` skips it

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_build_without_a_warning_and_every_reference_resolves(tmp_path):
    # -W: a warning fails; -n: every cross-reference must resolve (nitpicky); -E: no saved state; -j 1: one process
    command = [sys.executable, "-m", "sphinx", "-W", "-n", "-E", "-q", "-j", "1", "-b", "html", "docs", str(tmp_path)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-6000:]
    assert time.monotonic() - start < 120  # about 20 s on 2 cores
    settings = (tmp_path / "reference" / "settings.html").read_text()
    missing = [f"{key}.{f.name}" for key, cls in GROUPS.items() for f in fields(cls)]
    missing = [name for name in missing if f"--model.{name}</span>" not in settings]
    assert not missing, f"fields missing from the settings reference: {missing}"


def test_every_link_from_the_docs_to_a_file_of_the_checkout_finds_it():
    # links that leave docs/ (benchmark pages, notebooks, configs) are not part of the site: Sphinx cannot check them
    broken = []
    for page in (ROOT / "docs").rglob("*.md"):
        for target in re.findall(r"\]\((\.\./[^)#\s]+)", page.read_text()):
            if not (page.parent / target).resolve().exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
