"""Bad files and late failures, fed through ``python -m infgrpo.fit``: each stops before the model loads (or
before the first step) with one message naming the file, the line or the setting and what is valid."""

import json
from pathlib import Path

import pytest
import torch

from infgrpo.fit import main
from tests.test_fit import QUICK, ROOT, cli_error

TINY = ["--config", str(ROOT / "configs" / "tiny.yaml")]


def data_folder(tmp_path: Path, train: str, name: str = "data") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "train.jsonl").write_text(train)
    return folder


def own_data(folder) -> list[str]:
    return ["--data.path", str(folder), "--data.eval_split", "null"]


def test_a_model_folder_that_does_not_exist_is_named_as_neither_folder_nor_hub_id(capsys, tmp_path):
    line = cli_error(capsys, *TINY, "--model.policy.model_name_or_path", str(tmp_path / "no" / "model"))
    assert "model.policy.model_name_or_path=" in line and "is neither an existing folder" in line
    line = cli_error(capsys, *TINY, "--model.policy.model_name_or_path", "no-such-org/no-such-model")
    assert "the hub is offline (HF_HUB_OFFLINE=1) with no cached copy of it" in line  # conftest: offline


def test_an_empty_train_file_names_the_file(capsys, tmp_path):
    folder = data_folder(tmp_path, "")
    line = cli_error(capsys, *TINY, *own_data(folder))
    assert f"{folder / 'train.jsonl'} is empty" in line


def test_a_malformed_line_names_the_file_and_its_line(capsys, tmp_path):
    folder = data_folder(tmp_path, '{"prompt": "rev ab"}\n{"prompt": "rev cd"\n{"prompt": "dup x"}\n')
    line = cli_error(capsys, *TINY, *own_data(folder))
    assert f"{folder / 'train.jsonl'} line 2 is not valid JSON" in line
    folder = data_folder(tmp_path, '{"prompt": "rev ab"}\n[1, 2]\n', name="lists")
    assert "train.jsonl line 2 is a JSON list, not an object of columns" in cli_error(capsys, *TINY, *own_data(folder))


def test_a_data_file_of_another_type_says_what_data_path_expects(capsys, tmp_path):
    notes = tmp_path / "train.txt"
    notes.write_text("rev ab\n")
    line = cli_error(capsys, *TINY, *own_data(notes))
    assert "is a .txt file; data.path expects one data file (.jsonl, .json, .csv, .parquet) or a folder" in line


def test_a_ckpt_path_that_is_no_checkpoint_stops_before_the_model_loads(capsys, tmp_path):
    text = tmp_path / "notes.ckpt"
    text.write_text("not a checkpoint")
    assert "is not a checkpoint written by Lightning" in cli_error(capsys, *TINY, "--ckpt_path", str(text))
    tensor = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(2)}, tensor)
    assert "it holds weight, no state_dict" in cli_error(capsys, *TINY, "--ckpt_path", str(tensor))
    assert "does not exist" in cli_error(capsys, *TINY, "--ckpt_path", str(tmp_path / "missing.ckpt"))


def test_a_prompt_past_the_context_stops_the_run_before_its_first_step(capsys, tmp_path):
    # the tiny model's context is 256 positions; one prompt of ~230 tokens among short ones, 64 new tokens
    long = {"prompt": "rev " + "ab" * 115}
    rows = [{"prompt": f"rev {chr(97 + i % 20)}{chr(98 + i % 20)}"} for i in range(70)]
    folder = data_folder(tmp_path, "".join(json.dumps(r) + "\n" for r in [*rows[:7], long]), name="early")
    args = [*TINY, "--data.max_prompt_length", "300", "--data.batch_size", "2"]
    args += ["--trainer.default_root_dir", str(tmp_path / "run"), *QUICK[:2], "--model.sampler.max_new_tokens", "64"]
    line = cli_error(capsys, *args, *own_data(folder))  # among the first rows: found before the model loads
    assert "model.sampler.max_new_tokens=64 does not fit the model's context: row 7 of split 'train' has" in line
    folder = data_folder(tmp_path, "".join(json.dumps(r) + "\n" for r in [*rows, long]))  # past the first rows
    with pytest.raises(ValueError, match=r"training prompts: prompt_ids\[70\] has \d+ tokens; with max_new_tokens=64"):
        main([*args, *own_data(folder)])
    assert not list((tmp_path / "run").glob("grpo/version_*/metrics.csv"))  # no step was logged


def test_adaptive_groups_settings_that_cannot_work_stop_before_the_model_loads(capsys):
    on = ["--model.adaptive_groups.enabled", "true"]
    line = cli_error(capsys, *TINY, *on, "--model.adaptive_groups.max_samples_per_prompt", "4")
    assert "adaptive_groups.max_samples_per_prompt=4 is below group_size=8" in line
    line = cli_error(capsys, *TINY, *on, "--model.adaptive_groups.max_samples_per_step", "32")
    assert "adaptive_groups.max_samples_per_step=32 is below data.batch_size x group_size=64" in line
    line = cli_error(capsys, *TINY, *on, "--model.sampler.decoder", "hf_micro")
    assert "adaptive_groups.enabled needs sampler.decoder='engine'" in line
    line = cli_error(capsys, *TINY, *on, "--model.adaptive_groups.rule", "greedy")
    assert "model.adaptive_groups.rule" in line


def test_a_config_file_indented_with_a_tab_is_named_with_its_line(capsys, tmp_path):
    tabbed = tmp_path / "tabbed.yaml"
    tabbed.write_text("model:\n\tgroup_size: 4\n")
    line = cli_error(capsys, *TINY, "--config", str(tabbed))
    assert f"--config {tabbed} line 2: a tab indents it, and YAML allows only spaces for indentation" in line


def test_a_missing_gguf_file_and_a_stop_id_past_the_vocabulary_are_error_lines(capsys):
    line = cli_error(capsys, *TINY, "--model.policy.gguf_file", "missing.gguf")
    assert "model.policy.gguf_file='missing.gguf' does not exist (neither in the model folder" in line
    line = cli_error(capsys, *TINY, "--model.sampler.stop_token_ids", "[999999]")
    assert "model.sampler.stop_token_ids=[999999]: 999999 is outside the model's vocabulary (vocab_size=103" in line


def test_a_rewards_flag_of_names_and_weights_says_what_its_yaml_says(capsys):
    line = cli_error(capsys, *TINY, "--model.rewards", "{synthetic: 1.0}")
    assert "model.rewards (--model.rewards) maps reward names to weights: they go in model.rewards.functions" in line
