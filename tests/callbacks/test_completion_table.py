"""The completion table: numbers without -0, prompts that show the question, not the system prompt."""

import math

import lightning as L

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.callbacks.completion_table import _number, log_completions, prompt_for_table
from infgrpo.data import PromptDataModule
from infgrpo.rewards.shaping import overlong_penalty


def test_negative_zero_prints_as_zero(capsys):
    assert _number(-0.0) == "0" and _number(-0.25) == "-0.25"
    log_completions([], 3, [{"prompt": "p", "completion": "c", "reward": 1.0, "overlong": -0.0}])
    out = capsys.readouterr().out
    assert "overlong=0 " in out and "-0" not in out


def test_overlong_reward_is_plus_zero_below_the_buffer():
    values = overlong_penalty(completion_lengths=[3, 12], max_completion_length=12)
    assert values[0] == 0.0 and math.copysign(1.0, values[0]) == 1.0
    assert values[1] == -1.0


def test_table_prompt_is_the_user_turn_or_the_prompt_end():
    assert prompt_for_table("count 3 9", "system\nYou are ... user\ncount 3 9") == "count 3 9"
    templated = "system\n" + "You are a helpful AI assistant. " * 20 + "\nuser\nrev abcdefg\nassistant\n"
    shown = prompt_for_table(None, templated, n=40)
    assert shown.startswith("...") and "rev abcdefg" in shown and len(shown) == 40


def test_logged_table_shows_the_question_not_the_system_prompt(tmp_path, capsys):
    module = GRPOModule(
        group_size=2, sampler=SamplerConfig(num_slots=2, max_new_tokens=8), logging={"log_completions_every_n_steps": 1}
    )
    data = PromptDataModule(path="tiny", batch_size=2, eval_size=0, system_prompt="You are a careful solver.")
    trainer = L.Trainer(
        max_steps=1, accelerator="cpu", default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, enable_checkpointing=False,
    )  # fmt: skip
    trainer.fit(module, data)
    table = capsys.readouterr().out.split("completions:")[1]
    rows = [line for line in table.splitlines() if "|" in line]
    assert len(rows) == 4
    assert all("careful solver" not in r and "system" not in r for r in rows)
    assert all(any(task in r for task in ("rev ", "count ", "dup ", "sum ", "sort ")) for r in rows), rows
