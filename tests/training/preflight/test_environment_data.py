"""The data an environment needs, checked before the model loads (issue #59, items 2a and 2c): ``data.path: null``
needs one environment, a length and a ``reset`` that takes the placeholder rows; a mapping of environments needs an
``environment`` column naming one of them in every row (the command line names the file row; the Python API checks
the data module's rows as fit starts)."""

import json

import datasets
import lightning as L
import pytest

from infgrpo import GRPOModule
from infgrpo.agent import AgentConfig
from infgrpo.data import PromptDataModule
from infgrpo.settings import ConfigError
from infgrpo.training.preflight.data_check import check_environment_data
from tests.helpers import refuse_model_load
from tests.test_fit import ROOT, cli_error

T = "tests.agent.toolbox"
TINY = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--model.agent.chat_template", "compact"]
MAPPING = json.dumps({"count": f"{T}:Counter", "plain": f"{T}:Plain"})


@pytest.fixture
def no_model_load(monkeypatch, tmp_path):
    """A case that gets past every check reaches the model's loading, which raises :class:`Loaded`."""
    refuse_model_load(monkeypatch, tmp_path)


def no_data(agent, max_steps=10):
    """The refusal of a run without data (``data.path: null``) with the ``model.agent`` settings ``agent``."""
    with pytest.raises(ConfigError) as err:
        check_environment_data({"path": None}, AgentConfig(**agent), max_steps)
    message = str(err.value)
    assert message.startswith(
        "data.path=None (no dataset: the environment's reset() writes each prompt, TRL's placeholder rows)"
    ), message
    return message


def test_no_data_needs_one_environment_a_length_and_a_reset_that_takes_the_rows():
    assert no_data({}).endswith("needs model.agent.environment, one environment; give data.path, or an environment")
    assert ": model.agent.environment is a mapping of environments, which routes each row by its 'environment' " in (
        no_data({"environment": json.loads(MAPPING)})
    )
    assert no_data({"environment": f"{T}:Counter"}, -1).endswith("needs trainer.max_steps >= 1, which sets the "
                                                                  "run's length; got -1")  # fmt: skip
    assert ": Strict.reset cannot take the placeholder rows' columns prompt= and seed=; give it **kwargs" in (
        no_data({"environment": f"{T}:Strict"})
    )
    check_environment_data({"path": None}, AgentConfig(environment=f"{T}:Counter"), 10)  # one, a length: fine


def test_a_mapping_names_the_file_row_with_an_unknown_environment_or_none(tmp_path):
    rows = [{"prompt": "a", "environment": "count"}, {"prompt": "b", "environment": "plain"}]
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bad.write_text("".join(json.dumps(r) + "\n" for r in [*rows, {"prompt": "c", "environment": "chess"}]))
    agent = AgentConfig(environment=json.loads(MAPPING))
    check_environment_data({"path": str(good), "eval_split": None}, agent, 10)  # every row routed
    with pytest.raises(ConfigError) as err:
        check_environment_data({"path": str(bad), "eval_split": None}, agent, 10)
    assert str(err.value) == (
        f"data.path={str(bad)!r} (split 'train') row 2 has environment='chess', which is none of "
        "model.agent.environment's names: count, plain"
    )
    with pytest.raises(ConfigError) as err:  # tiny: no environment column
        check_environment_data({"path": "tiny"}, agent, 10)
    assert str(err.value).startswith(
        "data.path='tiny' (split 'train') row 0 has no 'environment' column, by which model.agent.environment's "
        "mapping (count, plain) routes each row (TRL's rule)"
    )


@pytest.mark.usefixtures("no_model_load")
def test_the_command_line_names_the_file_row_before_loading(capsys, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "c", "environment": "chess"}) + "\n")
    flags = ["--model.agent.environment", MAPPING, "--data.eval_split", "null", "--data.batch_size", "1"]
    line = cli_error(capsys, *TINY, *flags, "--data.path", str(bad))
    assert line.startswith(f"error: data.path={str(bad)!r} (split 'train') row 0 has environment='chess', which")


def test_the_python_api_checks_the_data_modules_rows_as_fit_starts(tmp_path):
    module = GRPOModule(
        group_size=2, sampler={"num_slots": 2, "max_new_tokens": 4}, threads=1,
        agent={"environment": {"count": f"{T}:Counter", "plain": f"{T}:Plain"}, "chat_template": "compact"},
    )  # fmt: skip
    rows = datasets.Dataset.from_list([{"prompt": "a", "environment": "count"}, {"prompt": "b", "environment": "x"}])
    data = PromptDataModule(train_dataset=rows, batch_size=2, eval_split=None)
    trainer = L.Trainer(max_steps=1, logger=False, enable_progress_bar=False, default_root_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^training row 1 has environment='x', which is none of "):
        trainer.fit(module, data)
    assert trainer.global_step == 0
