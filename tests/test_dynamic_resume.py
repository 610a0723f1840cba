"""Dynamic sampling with adaptive groups resumes exactly: a ``python -m infgrpo.fit`` run killed with SIGKILL
after its step-2 checkpoint, resumed from it, ends with the parameters of an uninterrupted run (bit for bit: one
thread, one machine). The checkpoint carries the prompt stream's position, the informative rate, the data order,
the random states and the rescue rates of adaptive groups' value rule."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

pytestmark = pytest.mark.slow  # spawns processes or runs whole fits: `pytest -m "not slow"` leaves it out

ROOT = Path(__file__).resolve().parents[1]


def config(tmp_path: Path, name: str, data: Path) -> Path:
    out = tmp_path / name
    cfg = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu", "max_steps": 4, "logger": False, "enable_progress_bar": False,
            "enable_model_summary": False, "default_root_dir": str(out), "limit_val_batches": 0,
            "callbacks": [{
                "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                "init_args": {"dirpath": str(out / "ckpt"), "every_n_train_steps": 1, "save_top_k": -1},
            }],
        },
        "model": {
            "policy": {"model_name_or_path": "tiny"}, "group_size": 4,
            "sampler": {"num_slots": 4, "max_new_tokens": 16}, "optimizer": {"learning_rate": 1e-3},
            "dynamic_sampling": {"enabled": True}, "adaptive_groups": {"enabled": True}, "threads": 1,
        },
        "data": {"path": str(data), "batch_size": 2, "eval_split": None},
    }  # fmt: skip
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def fit(path: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "infgrpo.fit", "--config", str(path), *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]


def weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return torch.load(ckpt, weights_only=True)["state_dict"]


def test_a_killed_run_resumes_to_the_parameters_of_an_uninterrupted_one(tmp_path):
    from infgrpo.data.datamodule import load_rows

    data = tmp_path / "data"
    data.mkdir()
    rows = load_rows("tiny", "train")[:32]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    straight = fit(config(tmp_path, "straight", data))
    killed_path = config(tmp_path, "killed", data)
    killed = fit(killed_path)
    deadline = time.time() + 600
    while not list((tmp_path / "killed" / "ckpt").glob("*step=2.ckpt")):
        assert killed.poll() is None, killed.stderr.read()[-3000:]
        assert time.time() < deadline, "no step-2 checkpoint within 600 s"
        time.sleep(0.2)
    killed.send_signal(signal.SIGKILL)
    killed.communicate()
    assert not list((tmp_path / "killed" / "ckpt").glob("*step=4.ckpt"))  # killed before the end
    step2 = next((tmp_path / "killed" / "ckpt").glob("*step=2.ckpt"))
    finish(fit(killed_path, "--ckpt_path", str(step2)))
    finish(straight)
    want = weights(next((tmp_path / "straight" / "ckpt").glob("*step=4.ckpt")))
    got = weights(next((tmp_path / "killed" / "ckpt").glob("*step=4.ckpt")))
    for name, value in want.items():
        assert torch.equal(value, got[name]), name
    saved = torch.load(step2, weights_only=True)
    assert len(saved["infgrpo_stream"]) == 1  # one rank's position in the prompt stream
    assert saved["infgrpo_sampler"]["informative_rate"]["judged"] > 0
    assert "rescue_rates" in saved["infgrpo_sampler"]  # adaptive groups' value prior resumes too
