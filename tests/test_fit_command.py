"""The command as a user and a scheduler meet it (issue #60, item 4): the installed ``infgrpo-fit`` exits 0 after a
run, prints no object and ends with where its state went; a bad setting exits 2 with one ``error:`` line; a LoRA run
that loads no 4-bit weights never imports bitsandbytes (on CPUs with AVX512-BF16 its import asks the hub for a
kernel); the stop line's resume command parses back to the words given."""

import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from infgrpo.callbacks.interruption import Interruption
from infgrpo.fit import main, resume_line

ROOT = Path(__file__).resolve().parents[1]


def test_the_resume_command_is_quoted_as_a_shell_reads_it():
    stop = Interruption()
    stop.signal, stop.step, stop.checkpoint = signal.SIGTERM, 3, Path("runs/a b/last.ckpt")
    given = ["--config", "my configs/agent.yaml", "--model.agent.tools", "[t:add]", "--data.prompt_template", "Q: {x}?"]
    line = resume_line(stop, [*given, "--ckpt_path", "old.ckpt", "--ckpt_path=older.ckpt"])
    assert line.startswith("[infgrpo] stopped by SIGTERM after step 3: checkpoint runs/a b/last.ckpt; resume: ")
    command = line.split("; resume: ", 1)[1]
    assert "'[t:add]'" in command  # unquoted, a shell would read it as a glob
    assert shlex.split(command) == ["python", "-m", "infgrpo.fit", *given, "--ckpt_path", "last"]


def test_a_run_without_checkpoints_says_so_before_the_model_loads(monkeypatch, capsys, tmp_path):
    def loading(*args, **kwargs):
        raise RuntimeError("the model loads here")

    monkeypatch.setattr("infgrpo.module.load_policy", loading)
    args = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--trainer.default_root_dir", str(tmp_path)]
    with pytest.raises(RuntimeError, match="the model loads here"):  # the note, then the model would load
        main([*args, "--trainer.enable_checkpointing", "false", "--model.output_dir", "adapter"])
    assert capsys.readouterr().out.splitlines()[-1] == (
        "[infgrpo] trainer.enable_checkpointing is false: this run writes no checkpoint and cannot be resumed; it "
        "keeps model.output_dir (adapter) alone"
    )


def installed_command() -> str:
    """The console script ``pyproject.toml`` installs beside this interpreter."""
    found = shutil.which("infgrpo-fit", path=str(Path(sys.executable).parent))
    assert found, f"infgrpo-fit is not installed beside {sys.executable} (pip install -e .)"
    return found


@pytest.mark.slow  # spawns the installed command twice
def test_the_installed_command_exits_0_after_a_lora_run_without_bitsandbytes_and_2_on_a_bad_setting(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])  # this checkout
    tiny = ["--config", str(ROOT / "configs" / "tiny.yaml")]
    run = [  # -X importtime lists every module the run imports, on stderr
        sys.executable, "-X", "importtime", installed_command(), *tiny, "--model.lora.r", "8", "--trainer.max_steps",
        "2", "--model.group_size", "2", "--model.sampler.max_new_tokens", "8", "--trainer.logger", "false",
        "--model.output_dir", "adapter", "--trainer.default_root_dir", str(tmp_path), "--model.threads", "1",
    ]  # fmt: skip
    bad = [installed_command(), *tiny, "--model.group_size", "1"]
    procs = [subprocess.Popen(c, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in (run, bad)]  # fmt: skip
    (out, err), (bad_out, bad_err) = (p.communicate(timeout=600) for p in procs)
    assert procs[0].returncode == 0, err[-3000:]
    assert "GRPOCLI" not in out + err and "object at 0x" not in out + err
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert out.splitlines()[-1] == f"[infgrpo] done after step 2: checkpoint {last}; the trained adapter in " + str(
        tmp_path / "adapter"
    )
    # peft's own `import bitsandbytes` is listed too, halted (bitsandbytes is hidden from it): a real import loads its
    # submodules (bitsandbytes.functional, bitsandbytes.backends.cpu.ops: where the hub is asked)
    imported = [line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")]
    assert "peft" in imported and not [m for m in imported if m.startswith("bitsandbytes.")]
    state = torch.load(last, weights_only=True)
    assert state["global_step"] == 2 and sum(v.numel() for v in state["state_dict"].values()) == 65_536
    assert procs[1].returncode == 2, bad_err[-3000:]
    errors = [line for line in bad_err.splitlines() if line.startswith("error:")]
    assert errors == ["error: model.group_size=1 must be an integer >= 2 (GRPO compares samples of a group)"]
    assert "Traceback" not in bad_err and not bad_out.strip()
