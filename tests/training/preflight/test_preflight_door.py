"""The preflight's one list of checks (``preflight.door.STEPS``), run by the command line and by the Python API."""

import lightning as L
import pytest

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.data import PromptDataModule
from infgrpo.settings import ConfigError
from infgrpo.training.preflight.door import STEPS
from tests.helpers import trainer
from tests.test_fit import ROOT, cli_error

SMALL = dict(group_size=2, sampler=SamplerConfig(num_slots=2, max_new_tokens=8))


class Started(Exception):
    """Training began: every check of fit start passed."""


class StopAtTrainStart(L.Callback):
    def on_train_start(self, trainer, module):
        raise Started


def test_every_step_says_what_it_reads_and_how_each_door_runs_it():
    names = [step.name for step in STEPS]
    assert len(set(names)) == len(names)
    parsing = [step.before_parsing for step in STEPS]
    assert parsing == sorted(parsing, reverse=True)  # the steps on the words come first
    for step in STEPS:
        assert step.reads and callable(step.command_line)
        assert callable(step.python_api) or (isinstance(step.python_api, str) and step.python_api), step.name


def test_the_python_api_refuses_max_steps_0_with_the_command_lines_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # runs/ of a run that got through would land here
    config = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--trainer.max_steps", "0"]
    line = cli_error(capsys, *config)
    with pytest.raises(ConfigError) as refused:  # Lightning takes 0 and trains nothing
        trainer(tmp_path, 0).fit(GRPOModule(**SMALL), PromptDataModule(path="tiny", batch_size=2))
    assert (
        str(refused.value)
        == "trainer.max_steps=0 (0 trains nothing) must be -1 (no limit: max_epochs ends the run) or >= 1"
    )
    assert line == f"error: {refused.value}"


def test_the_python_api_warns_for_settings_that_do_nothing_as_the_command_line_does(tmp_path):
    module = GRPOModule(**SMALL, rewards={"functions": {"synthetic": 1.0, "format": 0.0}})
    with pytest.warns(
        UserWarning, match=r"\[infgrpo\] model.rewards.functions\['format'\]=0 adds nothing to the reward"
    ):
        with pytest.raises(Started):
            trainer(tmp_path, 1, callbacks=[StopAtTrainStart()]).fit(
                module, PromptDataModule(path="tiny", batch_size=2)
            )


def test_the_python_api_refuses_cuda_graphs_on_off_cuda_before_the_first_step(tmp_path):
    module = GRPOModule(group_size=2, sampler=SamplerConfig(num_slots=2, max_new_tokens=8, cuda_graphs="on"))
    with pytest.raises(ConfigError, match=r"^model.sampler.cuda_graphs='on' needs a CUDA device, and the run is on c"):
        trainer(tmp_path, 1, callbacks=[StopAtTrainStart()]).fit(module, PromptDataModule(path="tiny", batch_size=2))


def test_the_python_api_checks_the_held_out_rows_for_what_the_rewards_read():
    from types import SimpleNamespace

    from infgrpo.training.preflight.fit_start import check_reward_rows

    turn = [{"role": "user", "content": "What is 3+4?"}]
    good = [{"prompt": turn, "meta": {"prompt": turn, "solution": "7"}}]
    data = SimpleNamespace(train_items=good, eval_items=[{"prompt": turn, "meta": {"prompt": turn, "answer": "7"}}])
    with pytest.raises(ConfigError, match=r"needs the dataset column 'solution' .* which the held-out split lacks"):
        check_reward_rows({"trl.rewards:accuracy_reward": 1.0}, data)
    data.eval_items = [{"prompt": "What is 3+4?", "meta": {"prompt": "What is 3+4?", "solution": "7"}}]
    with pytest.raises(ConfigError, match=r"reads conversational completions .* prompts of the held-out split are "):
        check_reward_rows({"trl.rewards:accuracy_reward": 1.0}, data)
    check_reward_rows({"format": 1.0}, data)  # the built-ins read both kinds
