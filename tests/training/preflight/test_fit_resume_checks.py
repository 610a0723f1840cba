"""A resumed run checked against its checkpoint before the model loads (issue #45, item 5): a checkpoint with no step
left, a folder given as ``--ckpt_path``, and other data, group or batch sizes than the checkpoint's (a warning where
the saved data position still applies, an error where it cannot)."""

import json
import os
import warnings

import pytest
import torch

from infgrpo.settings import ConfigError
from infgrpo.training.preflight.checkpoints import check_checkpoint_name
from infgrpo.training.preflight.resume_check import check_data_position
from tests.helpers import Loaded, refuse_model_load
from tests.test_fit import ROOT, cli_error
from tests.training.preflight.test_fit_bad_input import own_data

TINY = ["--config", str(ROOT / "configs" / "tiny.yaml")]
SAVED_DATA = {"path": "tiny", "config_name": None, "train_split": "train", "train_size": None, "batch_size": 8}


@pytest.fixture(autouse=True)
def no_model_load(monkeypatch, tmp_path):
    """Each case must stop (or warn) before the model loads; a run that gets there raises :class:`Loaded`."""
    refuse_model_load(monkeypatch, tmp_path)


def checkpoint(path, step=3, group_size=8, consumed=24, max_steps=None, **data):
    """A checkpoint's top level as Lightning writes it (one small tensor for weights); ``max_steps``: the run's
    ``trainer.max_steps``, as infgrpo writes it (absent: a checkpoint of an older infgrpo)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "state_dict": {"w": torch.zeros(2)}, "global_step": step,
            **({"infgrpo_max_steps": max_steps} if max_steps is not None else {}),
            "hyper_parameters": {"group_size": group_size, "lora": {"r": 0}},
            "datamodule_hyper_parameters": {**SAVED_DATA, **data},
            "PromptDataModule": {"sampler": {"epoch": 0, "consumed_prompts": consumed, "seed": 0}},
        },
        path,
    )  # fmt: skip
    return path


def warned(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args)
    return [str(w.message) for w in caught if str(w.message).startswith("[infgrpo]")]


def test_a_checkpoint_at_or_past_max_steps_has_nothing_to_train(capsys, tmp_path):
    ckpt = checkpoint(tmp_path / "step3.ckpt", step=3)
    line = cli_error(capsys, *TINY, "--trainer.max_steps", "2", "--ckpt_path", str(ckpt))
    assert "the checkpoint is at step 3 and trainer.max_steps=2: nothing to train; raise trainer.max_steps" in line
    line = cli_error(capsys, *TINY, "--trainer.max_steps", "3", "--ckpt_path", str(ckpt))
    assert "at step 3 and trainer.max_steps=3" in line and "--trainer.max_steps 6 trains 3 more" in line


def test_a_checkpoint_with_steps_left_and_the_same_settings_resumes_silently(tmp_path):
    ckpt = checkpoint(tmp_path / "step3.ckpt", step=3)
    from infgrpo.fit import main

    with warnings.catch_warnings(record=True) as caught, pytest.raises(Loaded):
        warnings.simplefilter("always")
        main([*TINY, "--trainer.max_steps", "4", "--ckpt_path", str(ckpt)])
    assert not [str(w.message) for w in caught if str(w.message).startswith("[infgrpo] --ckpt_path")]


def test_a_folder_names_its_checkpoints(capsys, tmp_path):
    run = tmp_path / "run" / "grpo" / "version_0" / "checkpoints"
    last = checkpoint(run / "last.ckpt")
    checkpoint(run / "epoch=0-step=2.ckpt")
    line = cli_error(capsys, *TINY, "--ckpt_path", str(tmp_path / "run"))
    assert f"is a folder; infgrpo resumes from one checkpoint file: its last checkpoint is {last}" in line
    assert f"(it also holds 1 other checkpoint); give --ckpt_path {last}" in line
    (tmp_path / "empty").mkdir()
    line = cli_error(capsys, *TINY, "--ckpt_path", str(tmp_path / "empty"))
    assert "is a folder; infgrpo resumes from one checkpoint file, and it holds none" in line


def test_a_folder_of_several_checkpoints_lists_the_newest(tmp_path):
    for step in range(6):
        path = checkpoint(tmp_path / f"step={step}.ckpt")
        os.utime(path, (step, step))
    with pytest.raises(
        ConfigError, match=r"holds 6 checkpoints, newest first: .*step=5.ckpt, .*step=4.ckpt, .* and 2 more"
    ):
        check_checkpoint_name(str(tmp_path))


def test_other_data_whose_rows_end_before_the_saved_position_is_an_error(capsys, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps({"prompt": f"rev a{c}"}) + "\n" for c in "bcdefghijk"))
    ckpt = checkpoint(tmp_path / "c.ckpt", consumed=24)
    args = [*TINY, *own_data(folder), "--data.batch_size", "2", "--trainer.max_steps", "9", "--ckpt_path", str(ckpt)]
    line = cli_error(capsys, *args)
    assert f"data.path={str(folder)!r} (the checkpoint's: 'tiny')" in line
    assert "the checkpoint's data position (epoch 0, 24 prompts consumed) is past the 10 training rows" in line


def data(**settings):
    return {**SAVED_DATA, "eval_fraction": 0.0, "task_seed": 0, **settings}


def saved(epoch=1, **position):
    return {
        "datamodule_hyper_parameters": SAVED_DATA, "hyper_parameters": {"group_size": 8},
        "PromptDataModule": {"sampler": {"epoch": epoch, **(position or {"consumed_prompts": 8})}},
    }  # fmt: skip


def test_other_data_that_the_saved_position_fits_warns():
    found = warned(check_data_position, "c.ckpt", saved(), data(train_size=100), 8)
    assert len(found) == 1
    assert "data.train_size=100 (the checkpoint's: None): the saved data position still applies" in found[0]
    assert "starts epoch 1 of this data's shuffled order after its first 8 prompts" in found[0]


def test_another_group_or_batch_size_warns_with_what_carries_over():
    found = warned(check_data_position, "c.ckpt", saved(), data(batch_size=4), 16)
    assert len(found) == 2
    assert "data.batch_size=4 differs from the checkpoint's 8: the saved data position (counted in prompts)" in found[0]
    two = warned(check_data_position, "c.ckpt", saved(), data(batch_size=4), 8, 4)
    assert two[0].endswith("4 prompts per rank (the same 16 prompts a step if the checkpoint's run had 2 ranks)")
    assert "model.group_size=16 differs from the checkpoint's 8: the resumed steps sample 16 completions" in found[1]
    assert warned(check_data_position, "c.ckpt", saved(), data(), 8) == []


def test_a_position_counted_in_batches_cannot_take_another_batch_size():
    with pytest.raises(ConfigError, match=r"counts its data position in batches .* resume with --data.batch_size 8"):
        check_data_position("c.ckpt", saved(consumed=3), data(batch_size=4), 8)
    assert warned(check_data_position, "c.ckpt", saved(consumed=3), data(), 8) == []


def test_the_warnings_reach_the_command_line_once(tmp_path):
    ckpt = checkpoint(tmp_path / "c.ckpt", group_size=4)
    from infgrpo.fit import main

    with warnings.catch_warnings(record=True) as caught, pytest.raises(Loaded):
        warnings.simplefilter("default")
        main([*TINY, "--trainer.max_steps", "9", "--ckpt_path", str(ckpt)])
    found = [str(w.message) for w in caught if str(w.message).startswith("[infgrpo] --ckpt_path")]
    assert found == [f"[infgrpo] --ckpt_path={str(ckpt)!r}: model.group_size=8 differs from the checkpoint's 4: the "
                     "resumed steps sample 8 completions a prompt (the checkpoint's steps sampled 4); its optimizer "
                     "state and data position carry over"]  # fmt: skip


def test_resuming_under_another_max_steps_notes_both_when_the_schedule_decays(tmp_path, capsys):
    ckpt = checkpoint(tmp_path / "c.ckpt", step=5, max_steps=10)
    from infgrpo.fit import main

    def noted(*flags):
        with pytest.raises(Loaded):
            main([*TINY, "--ckpt_path", str(ckpt), *flags])
        return [line for line in capsys.readouterr().out.splitlines() if line.startswith("[infgrpo] note:")]

    assert noted("--trainer.max_steps", "20") == [  # tiny.yaml's schedule is cosine
        f"[infgrpo] note: --ckpt_path={str(ckpt)!r}: trainer.max_steps=20 differs from the checkpoint's run (10): the "
        "cosine learning-rate schedule decays to 0 at step 20 instead, so at step 5 the rate is 0.854 x "
        "model.optimizer.learning_rate (the checkpoint's schedule: 0.5 x); --trainer.max_steps 10 keeps the "
        "checkpoint's schedule"
    ]
    assert noted("--trainer.max_steps", "10") == []  # the same count
    assert noted("--trainer.max_steps", "20", "--model.optimizer.lr_scheduler_type", "constant") == []


def test_resuming_with_other_tools_or_none_warns():
    from infgrpo.agent import AgentConfig
    from tests.agent import toolbox

    state = saved()
    state["hyper_parameters"]["agent"] = AgentConfig(tools=["tests.agent.toolbox:add"]).recorded()
    same = AgentConfig(tools=[toolbox.add])  # the object: recorded by its import path, as the checkpoint has it
    assert warned(check_data_position, "c.ckpt", state, data(), 8, 1, same) == []
    other = warned(check_data_position, "c.ckpt", state, data(), 8, 1, AgentConfig(tools=[toolbox.mul]))
    assert other == [
        "[infgrpo] --ckpt_path='c.ckpt': model.agent.tools=['tests.agent.toolbox:mul'] (the checkpoint's: "
        "['tests.agent.toolbox:add']): the checkpoint's run called other tools; the resumed steps render and run "
        "these (its policy, optimizer state and data position carry over)"
    ]
    (none,) = warned(check_data_position, "c.ckpt", state, data(), 8, 1, AgentConfig())
    assert none.startswith("[infgrpo] --ckpt_path='c.ckpt': model.agent.tools=[] (the checkpoint's: ['tests.agent.")
    assert "the checkpoint's run called tools, and the resumed steps decode without any" in none
    state["hyper_parameters"].pop("agent")  # a checkpoint of a run without tools
    (new,) = warned(check_data_position, "c.ckpt", state, data(), 8, 1, AgentConfig(environment=toolbox.Counter))
    assert "model.agent.environment='tests.agent.toolbox:Counter' (the checkpoint's: None)" in new
    assert "the checkpoint's run called no tools" in new
    assert warned(check_data_position, "c.ckpt", state, data(), 8, 1, AgentConfig()) == []
