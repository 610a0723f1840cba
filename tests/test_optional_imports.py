"""The installed package never imports trl or matplotlib; of the benchmarks, only the TRL sides import trl.

One fresh interpreter imports every module of ``infgrpo`` and of ``benchmarks`` but the TRL baselines
(``benchmarks.learn_trl`` and ``benchmarks.vlm_trl``, which ``learn`` and ``vlm`` import inside a function), with a
wrapper around ``builtins.__import__`` that records which module's import statement asks for each watched one. With
matplotlib installed (the dev extra), Lightning imports it through torchmetrics (``torchmetrics.utilities.plot``):
that import is a dependency's, so the test checks who imports, not only what ends up in ``sys.modules``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = r"""
import builtins, importlib, json, pkgutil

TRL_SIDES = ("benchmarks.learn_trl", "benchmarks.vlm_trl")

WATCHED = ("trl", "matplotlib")
importers = {}  # watched top-level name -> the modules whose import statements ask for it
real_import = builtins.__import__


def spy(name, globals=None, locals=None, fromlist=(), level=0):
    caller = (globals or {}).get("__name__", "?")
    if level == 0 and name.split(".")[0] in WATCHED and caller.split(".")[0] not in (*WATCHED, "mpl_toolkits"):
        importers.setdefault(name.split(".")[0], set()).add(caller)
    return real_import(name, globals, locals, fromlist, level)


builtins.__import__ = spy  # every import statement passes here, also for a module already in sys.modules
import benchmarks, infgrpo

names = [m.name for m in pkgutil.walk_packages(infgrpo.__path__, "infgrpo.")]
names += [m.name for m in pkgutil.walk_packages(benchmarks.__path__, "benchmarks.") if m.name not in TRL_SIDES]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": len(names), "importers": {k: sorted(v) for k, v in importers.items()}}))
"""


def test_no_module_of_the_package_or_the_benchmarks_but_the_trl_sides_imports_trl_or_matplotlib():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["modules"] > 100
    ours = [m for found in seen["importers"].values() for m in found if m.split(".")[0] in ("infgrpo", "benchmarks")]
    assert ours == [], f"trl or matplotlib imported at module level by {ours} (all importers: {seen['importers']})"
    assert "trl" not in seen["importers"], seen["importers"]  # nor by a dependency
