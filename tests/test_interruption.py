"""Ctrl-C and SIGTERM are a checkpoint, never a loss (issue #45): a ``python -m infgrpo.fit`` run signalled after
step 1 finishes the step under way, writes ``last.ckpt`` and ``model.output_dir``, says where and how to resume,
exits with 128 + the signal; ``--ckpt_path last`` then reaches the parameters of an uninterrupted run, bit for bit
(one thread). The signalled runs wait for their signal at the end of step 1 (:mod:`tests.callbacks.signal_point`),
so the test does not depend on how fast the machine is (issue #59: a loaded machine finished all steps first)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

pytestmark = pytest.mark.slow  # spawns processes or runs whole fits: `pytest -m "not slow"` leaves it out

ROOT = Path(__file__).resolve().parents[1]
STEPS = 5


def config(tmp_path: Path, name: str, signal_point: bool = False) -> Path:
    out = tmp_path / name
    point = [{"class_path": "tests.callbacks.signal_point.SignalPoint", "init_args": {"step": 1}}]
    cfg = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu", "max_steps": STEPS, "logger": False, "enable_progress_bar": False,
            "enable_model_summary": False, "default_root_dir": str(out), "limit_val_batches": 0,
            "log_every_n_steps": 1, **({"callbacks": point} if signal_point else {}),
        },
        "model": {
            "policy": {"model_name_or_path": "tiny"}, "group_size": 4,
            "sampler": {"num_slots": 4, "max_new_tokens": 8}, "optimizer": {"learning_rate": 1e-3}, "threads": 1,
            "output_dir": "trained",
        },
        "data": {"path": "tiny", "batch_size": 2, "eval_split": None, "train_size": 32},
    }  # fmt: skip
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def fit(path: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "infgrpo.fit", "--config", str(path), *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def trained(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "trained" / "model.safetensors")


def interrupt(proc: subprocess.Popen, sig: signal.Signals) -> list[str]:
    """Signals ``proc`` once it waits at the end of step 1 (its signal point's line); its output lines."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("[signal point] step 1 done"):
            proc.send_signal(sig)  # the run waits for it: it stops after step 1, on any machine load
            break
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 128 + sig, err[-3000:]
    return lines + out.splitlines()


def test_a_signalled_run_checkpoints_exits_128_plus_the_signal_and_resumes_exactly(tmp_path):
    # the uninterrupted run and one run per signal side by side (one thread each), then the two resumes
    straight = fit(config(tmp_path, "straight"))
    runs = {sig: (config(tmp_path, sig.name, signal_point=True), None) for sig in (signal.SIGTERM, signal.SIGINT)}
    runs = {sig: (path, fit(path)) for sig, (path, _) in runs.items()}
    outputs = {sig: interrupt(proc, sig) for sig, (path, proc) in runs.items()}
    lasts = {sig: tmp_path / sig.name / "checkpoints" / "last.ckpt" for sig in runs}
    stopped = {sig: torch.load(lasts[sig], weights_only=False)["global_step"] for sig in runs}  # before the resumes
    resumes = {sig: fit(path, "--ckpt_path", "last") for sig, (path, _) in runs.items()}
    _, err = straight.communicate(timeout=600)
    assert straight.returncode == 0, err[-3000:]
    want = trained(tmp_path / "straight")
    for sig, (path, _) in runs.items():
        ckpt, step = lasts[sig], stopped[sig]
        assert step == 1  # the signal lands at the end of step 1 (signal_point)
        last = [line for line in outputs[sig] if line.startswith("[infgrpo] stopped by")]
        assert last and f"stopped by {sig.name} after step {step}: checkpoint {ckpt}" in last[0]
        assert last[0].rstrip().endswith(f"--config {path} --ckpt_path last")
        _, err = resumes[sig].communicate(timeout=600)
        assert resumes[sig].returncode == 0, err[-3000:]
        got = trained(tmp_path / sig.name)  # written at the stop, then again at the resumed run's end
        assert all(torch.equal(got[k], want[k]) for k in want), f"{sig.name}: resumed run differs"
        assert torch.load(ckpt, weights_only=False)["global_step"] == STEPS  # the resumed run's end, in last.ckpt
