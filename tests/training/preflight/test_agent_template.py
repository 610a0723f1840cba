"""The preflight's "agent template" step: both doors run one ``prepare_template``, the command line on the tokenizer it
loads once, and each refuses a template whose calls infgrpo cannot read with the same line, before the model loads."""

import pytest

from infgrpo import GRPOModule
from infgrpo.agent.formats import FORMATS
from infgrpo.agent.shipped import shipped_template
from infgrpo.settings import ConfigError
from infgrpo.training.preflight import door
from tests.test_fit import ROOT, cli_error

AGENT = ["--config", str(ROOT / "configs" / "agent-calculator.yaml"), "--model.policy.model_name_or_path", "tiny"]
"""The agent config on the tiny model, whose tokenizer has no response template of its own (tiny-tools' has one)."""


def bracketed(tmp_path):
    """The compact template writing its calls as [CALL] ... [/CALL]: a form no call format reads."""
    path = tmp_path / "brackets.jinja"
    path.write_text(shipped_template("compact").replace("<tool_call>", "[CALL]").replace("</tool_call>", "[/CALL]"))
    return str(path)


def test_both_doors_refuse_a_template_whose_calls_no_format_reads_with_one_line(tmp_path, capsys):
    template = bracketed(tmp_path)
    line = cli_error(capsys, *AGENT, "--model.agent.chat_template", template)
    agent = {"tools": ["infgrpo.assets.calculator:add"], "chat_template": template}
    with pytest.raises(ConfigError) as api:
        GRPOModule(policy={"model_name_or_path": "tiny"}, agent=agent)
    assert line == f"error: model.{api.value}"
    assert line.startswith(f"error: model.agent.chat_template={template!r}: the chat template {template!r} writes tool")
    assert "agent.call_format" in line and "agent.chat_template: compact" in line


def test_the_command_line_loads_the_tokenizer_once_for_every_step_that_reads_it(capsys, monkeypatch):
    loads = []
    real = door.load_tokenizer
    monkeypatch.setattr(door, "load_tokenizer", lambda *a: loads.append(a) or real(*a))  # counts, loads for real
    line = cli_error(
        capsys, *AGENT, "--model.agent.chat_template", "compact", "--model.sampler.stop_token_ids", "[999]"
    )
    assert "model.sampler.stop_token_ids=[999]" in line  # the last step: the template's and the data's ran before it
    assert len(loads) == 1


def test_naming_the_call_format_lets_such_a_template_through(tmp_path):
    agent = {"tools": ["infgrpo.assets.calculator:add"], "chat_template": bracketed(tmp_path), "call_format": "qwen"}
    module = GRPOModule(policy={"model_name_or_path": "tiny"}, agent=agent, group_size=2)
    assert "[CALL]" in module.agent.template
    assert module.tokenizer.response_template == FORMATS["qwen"].response_template  # the named format's parser


def test_the_step_stands_in_the_one_list_before_the_data_and_names_where_the_api_runs_it():
    names = [step.name for step in door.STEPS]
    step = door.STEPS[names.index("agent template")]
    assert names.index("agent template") == names.index("model and data") - 1  # the rows are rendered with it
    assert step.prefix == "model." and "AgentRollout" in step.python_api and "prepare_template" in step.python_api
