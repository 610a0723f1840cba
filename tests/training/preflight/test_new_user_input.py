"""What a new user met (issue 60, item 4), each one clear line, before the model loads where the input decides it:
a warmup past the run, ``long_prompts: skip`` that drops every prompt, a reward reading chat messages of string
prompts, ``log_metric`` of a string, a reward model as the accuracy, a misspelt ``chat_template_kwargs`` key."""

import json
import re
import shutil
import warnings
from pathlib import Path

import pytest
import trl

from infgrpo.assets import TINY_MODEL_DIR
from infgrpo.data.template_options import check_template_kwargs
from infgrpo.policy.load import load_tokenizer
from infgrpo.rewards import RewardError, score_rewards
from infgrpo.rewards.config import RewardConfig
from infgrpo.settings import ConfigError, InfgrpoWarning
from tests.test_fit import ROOT, cli_error

TINY = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--trainer.max_steps", "1"]


def reads_first_message(completions, **kwargs):
    """The recipes' way: no annotation, ``completion[0]["content"]``."""
    return [float(len(completion[0]["content"]) > 3) for completion in completions]


def logs_text(completions, **kwargs):
    kwargs["log_metric"]("mood", "good")
    return [0.0] * len(completions)


def logs_list(completions, **kwargs):
    kwargs["log_metric"]("lengths", [len(c) for c in completions])
    return [0.0] * len(completions)


@pytest.fixture(autouse=True)
def no_model_load(monkeypatch, tmp_path):
    """A command-line case fails if the model would load: each must stop before it."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("infgrpo.module.load_policy", refuse)
    monkeypatch.chdir(tmp_path)


def test_a_warmup_longer_than_the_run_stops_before_the_model_loads(capsys):
    line = cli_error(capsys, *TINY, "--model.optimizer.warmup_steps", "100", "--model.optimizer.lr_scheduler_type",
                     "cosine")  # fmt: skip
    assert "model.optimizer.warmup_steps=100 leaves none of trainer.max_steps=1 optimizer steps to " in line
    assert "lr_scheduler_type='cosine'" in line


def test_skip_that_drops_every_prompt_stops_before_the_model_loads(capsys, tmp_path):
    folder = tmp_path / "long"
    folder.mkdir()
    (folder / "train.jsonl").write_text(
        "".join(json.dumps({"prompt": f"rev {'ab' * 20}{i}"}) + "\n" for i in range(90))
    )
    args = ["--data.path", str(folder), "--data.eval_split", "null", "--data.long_prompts", "skip"]
    line = cli_error(capsys, *TINY, *args, "--data.max_prompt_length", "5")
    assert "drops every training prompt: all 90 of split 'train' are longer" in line  # past the first 64 rows


def test_a_reward_reading_chat_messages_of_string_prompts_is_named_with_the_fix(capsys):
    reward = f'{{"{__name__}:reads_first_message": 1.0}}'
    line = cli_error(capsys, *TINY, "--model.rewards.functions", reward, "--model.rewards.accuracy", "null")
    assert "reads conversational completions (its code reads completion[0]['content']" in line
    assert "set data.as_conversation: true" in line


def test_the_same_failure_at_a_step_says_why_and_skip_says_it_each_time():
    name = f"{__name__}:reads_first_message"
    rows = [{"prompt": "rev abc"}] * 2
    with pytest.raises(RewardError) as err:
        score_rewards({name: 1.0}, ["cba", "x"], rows)
    assert "string indices must be integers" in str(err.value) and "; it read a completion as chat" in str(err.value)
    assert "on_error: skip" not in str(err.value) and "data.as_conversation: true" in str(err.value)
    with pytest.warns(InfgrpoWarning, match="string indices must be integers.*; it read a completion as chat"):
        score_rewards({name: 1.0, "synthetic": 1.0}, ["cba", "x"], rows, on_error="skip")


@pytest.mark.parametrize(("fn", "shown"), [("logs_text", "'good'"), ("logs_list", "[3, 1]")])
def test_log_metric_of_anything_but_a_number_is_named(fn, shown):
    with pytest.raises(RewardError, match=rf"log_metric\('\w+', {re.escape(shown)}\): the value must be one number"):
        score_rewards({f"{__name__}:{fn}": 1.0}, ["cba", "x"], [{"prompt": "p"}] * 2, on_error="skip")


def test_a_reward_model_is_no_accuracy(tmp_path):
    model = tmp_path / "rm"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForSequenceClassification"]}))
    with pytest.raises(ConfigError, match=r"accuracy='.*rm' is a reward model, whose score is unbounded"):
        RewardConfig(functions={str(model): 1.0}, accuracy=str(model))


def test_a_misspelt_template_option_is_refused_and_an_unread_one_warned():
    tokenizer = load_tokenizer("tiny")
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    with pytest.raises(ConfigError, match=r"'enable_thinkin' is not read .* \(did you mean 'enable_thinking'\?\)"):
        check_template_kwargs(tokenizer, {"enable_thinkin": False})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_template_kwargs(tokenizer, {"enable_thinking": False})  # read: nothing said
    with pytest.warns(InfgrpoWarning, match="reads no 'enable_thinking' .*does nothing with this model"):
        check_template_kwargs(load_tokenizer("tiny"), {"enable_thinking": False})  # the tiny template has no options


def test_the_command_line_refuses_the_misspelt_option_with_a_template_that_has_it(capsys, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(TINY_MODEL_DIR, folder)
    tokenizer = load_tokenizer("tiny")
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    tokenizer.save_pretrained(folder)  # the tiny model with Qwen3's template, which reads enable_thinking
    line = cli_error(capsys, *TINY, "--model.policy.model_name_or_path", str(folder), "--data.chat_template_kwargs",
                     '{"enable_thinkin": false}')  # fmt: skip
    assert "data.chat_template_kwargs: 'enable_thinkin' is not read" in line
