"""Nothing a user trains is lost, fed through ``python -m infgrpo.fit`` with the file system really failing: a folder
that cannot hold the model is one ``error:`` line before the model loads; a final write that fails anyway puts the
model in the run's version folder (exit status 1); ``--ckpt_path last`` resumes the newest ``last.ckpt`` across
versions, or says that none exists and where it looked."""

import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from infgrpo.fit import main
from infgrpo.settings import ConfigError
from infgrpo.training.preflight.checkpoints import find_last_checkpoint
from infgrpo.training.preflight.files import check_writable_folder
from tests.test_fit import QUICK, ROOT, cli_error

TINY = ["--config", str(ROOT / "configs" / "tiny.yaml"), *QUICK, "--trainer.max_steps", "1"]
PROC = Path("/proc/self").is_dir()  # Linux: /proc takes no new folder and no new file, even from root


def test_an_output_folder_that_cannot_be_written_stops_before_the_model_loads(capsys, tmp_path):
    run = ["--trainer.default_root_dir", str(tmp_path / "run")]
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file in the way")
    line = cli_error(capsys, *TINY, *run, "--model.output_dir", str(blocker))
    assert line.startswith(f"error: model.output_dir={str(blocker)!r} is a file, not a folder: give a folder")
    line = cli_error(
        capsys, *TINY, *run, "--model.output_dir", "notes.txt/adapter", "--trainer.default_root_dir", str(tmp_path)
    )
    assert f"model.output_dir='notes.txt/adapter' ({blocker / 'adapter'}) lies under the file {blocker}" in line
    line = cli_error(capsys, *TINY, "--trainer.default_root_dir", str(blocker / "run"))
    assert f"trainer.default_root_dir={str(blocker / 'run')!r} lies under the file {blocker}" in line
    if PROC:
        line = cli_error(capsys, *TINY, *run, "--model.output_dir", "/proc/infgrpo/adapter")
        assert "model.output_dir='/proc/infgrpo/adapter' cannot be created: /proc takes no new folder" in line
        line = cli_error(capsys, *TINY, *run, "--model.output_dir", "/proc/self")
        assert "model.output_dir='/proc/self' cannot be written (" in line
        assert "trainer.default_root_dir='/proc/infgrpo' cannot be created" in cli_error(
            capsys, *TINY, "--trainer.default_root_dir", "/proc/infgrpo"
        )
    assert not (tmp_path / "run").exists()  # nothing started


def test_the_check_writes_nothing_where_it_passes(tmp_path):
    check_writable_folder("model.output_dir", "a/b", tmp_path / "a" / "b")  # missing folders that can be created
    check_writable_folder("model.output_dir", str(tmp_path), tmp_path)  # an existing folder
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match="is a file"):
        check_writable_folder("output_dir", "x", Path(__file__))


def test_a_failed_final_write_keeps_the_model_and_last_resumes_it(capsys, tmp_path):
    root, out = tmp_path / "run", tmp_path / "out"
    (out / "model.safetensors").mkdir(parents=True)  # passes the check at the start; the weights' write then fails
    args = [*TINY, "--trainer.default_root_dir", str(root)]
    with pytest.raises(SystemExit) as stop:
        main([*args, "--model.output_dir", str(out)])
    assert stop.value.code == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "[infgrpo] error:" in line]
    rescued = root / "grpo" / "version_0" / "trained-model"
    assert len(lines) == 1 and f"could not write the trained model to {out}" in lines[0]
    assert lines[0].endswith(f"wrote it to {rescued} instead")
    last = root / "grpo" / "version_0" / "checkpoints" / "last.ckpt"
    trained = torch.load(last, weights_only=True)["state_dict"]
    weights = load_file(rescued / "model.safetensors")
    assert weights and all(torch.equal(w, trained[f"policy.{k}"]) for k, w in weights.items())  # the trained model
    assert (rescued / "tokenizer.json").is_file()
    # --ckpt_path last from a new run (a new, empty version folder) finds version_0's last.ckpt
    resumed = main([*args, "--trainer.max_steps", "2", "--ckpt_path", "last", "--model.output_dir", "adapter"])
    assert f"[infgrpo] --ckpt_path last: resuming from {last}" in capsys.readouterr().out
    assert resumed.trainer.ckpt_path == str(last) and resumed.trainer.global_step == 2
    assert resumed.trainer.log_dir.endswith("version_1") and (root / "adapter" / "model.safetensors").is_file()
    line = cli_error(capsys, *TINY, "--trainer.default_root_dir", str(tmp_path / "new"), "--ckpt_path", "last")
    assert f"--ckpt_path='last' found no last.ckpt under {tmp_path / 'new'}" in line


def test_last_is_the_newest_last_ckpt_across_versions(tmp_path):
    paths = [tmp_path / "grpo" / f"version_{v}" / "checkpoints" / "last.ckpt" for v in range(3)]
    paths.append(tmp_path / "a" / "b" / "c" / "d" / "e" / "last.ckpt")  # deeper than a run's layout: not searched
    for age, path in zip((30, 10, 20, 0), paths, strict=True):
        path.parent.mkdir(parents=True)
        path.touch()
        os.utime(path, (1e9 - age, 1e9 - age))
    assert find_last_checkpoint([tmp_path]) == paths[1]
    assert find_last_checkpoint([tmp_path / "grpo" / "version_0", tmp_path / "none"]) == paths[0]
    assert find_last_checkpoint([tmp_path / "none"]) is None
