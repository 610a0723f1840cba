"""Plain progress lines when the output is not a terminal: a real Trainer writing to a non-tty stream."""

import io
import re

import lightning as L

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.callbacks.plain_progress import PlainProgress
from infgrpo.data import PromptDataModule
from infgrpo.fit import main

LINE = re.compile(
    r"^\[infgrpo\] step (\d+)/4 reward -?[\d.]+ accuracy [\d.]+ rollout [\d.]+ s update [\d.]+ s \d+ tok/s$"
)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def fit(tmp_path, callback, eval_size=0):
    module = GRPOModule(group_size=2, sampler=SamplerConfig(num_slots=2, max_new_tokens=6))
    validate = dict(val_check_interval=2, check_val_every_n_epoch=None) if eval_size else dict(limit_val_batches=0)
    trainer = L.Trainer(
        max_steps=4, log_every_n_steps=2, accelerator="cpu", default_root_dir=tmp_path, logger=False,
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        callbacks=[callback], **validate,
    )  # fmt: skip
    trainer.fit(module, PromptDataModule(path="tiny", batch_size=2, eval_size=eval_size))


def test_a_line_every_log_every_n_steps_into_a_file(tmp_path):
    stream = io.StringIO()  # not a terminal, as a nohup / SLURM log
    fit(tmp_path, PlainProgress(stream=stream))
    lines = stream.getvalue().splitlines()
    assert [LINE.match(line).group(1) for line in lines] == ["2", "4"], lines


def test_each_validation_prints_the_held_out_accuracy_after_its_step(tmp_path):
    stream = io.StringIO()
    fit(tmp_path, PlainProgress(stream=stream), eval_size=4)  # the sanity check (before step 1) prints nothing
    lines = stream.getvalue().splitlines()
    held_out = re.compile(r"^\[infgrpo\] held-out after step (\d+): accuracy [\d.]+ reward -?[\d.]+$")
    assert [m.group(1) for m in map(held_out.match, lines) if m] == ["2", "4"], lines
    assert [m.group(1) for m in map(LINE.match, lines) if m] == ["2", "4"], lines


def test_nothing_on_a_terminal(tmp_path):
    stream = Terminal()
    fit(tmp_path, PlainProgress(stream=stream))
    assert stream.getvalue() == ""


def test_fit_cli_prints_progress_lines_when_stdout_is_redirected(tmp_path, capsys):
    args = ["--config", "configs/tiny.yaml", "--trainer.default_root_dir", str(tmp_path), "--trainer.max_steps", "4"]
    main([*args, "--trainer.log_every_n_steps", "2", "--model.sampler.max_new_tokens", "6", "--data.eval_size", "0"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[infgrpo] step")]
    assert [LINE.match(line).group(1) for line in lines] == ["2", "4"], lines
