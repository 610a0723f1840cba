"""Real TRL config files convert: recipe repositories' YAMLs, notebooks' GRPOConfigs and TRL's docs examples
(tests/fixtures/trl/, written in their shapes), with every key the conversion drops named; bad ``-o`` paths."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("trl")

from infgrpo.data.datamodule import check_data_settings  # noqa: E402
from infgrpo.from_trl import KNOWN, RENAMED, ConversionError, convert, main, read_trl_file  # noqa: E402
from infgrpo.training.hparams import check_settings  # noqa: E402
from infgrpo.trl.trl_settings import plain, trl_defaults  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "trl"
FILES = sorted(FIXTURES.glob("*.yaml"))


def noted(notes: list[str], key: str) -> bool:
    return any(n.startswith(f"{key}=") for n in notes)


def offline(config: dict) -> dict:
    """The converted config with the model and the dataset pointed at the tiny ones (the hub ids are not cached)."""
    config["model"].setdefault("policy", {})["model_name_or_path"] = "tiny"
    config["data"] = {**config["data"], "path": "tiny", "config_name": None, "train_split": "train", "mixture": None}
    if config["data"].get("eval_split") is not None:
        config["data"]["eval_split"] = "eval"
    return config


def test_there_are_files_of_each_kind():
    assert {f.stem for f in FILES} >= {"open_r1_recipe", "notebook_config", "trl_docs_cli", "trl_docs_mixture"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_real_file_converts_with_every_dropped_key_named(path):
    given = read_trl_file(path)
    result = convert(given)
    defaults = trl_defaults()
    for key, value in given.items():
        name = RENAMED.get(key, key)
        if key in RENAMED:
            assert any(n.startswith(f"{key}=") and f"read as {name}" in n for n in result.notes), key
        target = KNOWN.get(name)
        if target is None:
            assert any(n.startswith(f"{key}=") and " left out: " in n for n in result.notes), key
        elif isinstance(target, str) and plain(value) != plain(defaults.get(name)):
            assert noted(result.notes, name), name  # set, with no infgrpo key: named with the reason
    config = offline(result.config)
    check_settings(**config["model"])  # every group builds and checks (the reward imports)
    check_data_settings(config["data"])
    assert "on_error" not in config["model"].get("rewards", {})  # TRL's None and error rules, no blanket skip


def test_the_recipe_maps_its_script_arguments_and_names_the_rest():
    result = convert(read_trl_file(FIXTURES / "open_r1_recipe.yaml"))
    model, data = result.config["model"], result.config["data"]
    assert model["policy"]["dtype"] == "bfloat16"  # torch_dtype, TRL's older name of dtype
    assert model["rewards"]["functions"] == {"open_r1_accuracy": 1.0, "open_r1_format": 1.0}
    assert data["prompt_column"] == "problem" and data["system_prompt"].startswith("You are a helpful AI Assistant")
    assert data["max_prompt_length"] == 512 and data["path"] == "open-r1/OpenR1-Math-220k"
    assert "chat_template" not in data  # the recipe's script makes conversations: infgrpo's true wraps them so
    assert "warmup_steps" not in model["optimizer"]
    warmup = next(n for n in result.notes if n.startswith("warmup_ratio=0.1"))
    assert "set model.optimizer.warmup_steps to ceil(0.1 x the run's optimizer steps)" in warmup
    assert any(n.startswith("overwrite_output_dir=True not mapped: removed in transformers 5") for n in result.notes)
    assert any(n.startswith("wandb_project='open-r1' not mapped: an argument of the recipe's") for n in result.notes)


def test_the_notebook_s_older_fields_and_fractions_become_steps():
    result = convert(read_trl_file(FIXTURES / "notebook_config.yaml"))
    out = result.config
    assert out["model"]["optimizer"]["warmup_steps"] == 25  # warmup_ratio 0.1 of max_steps 250
    assert out["trainer"]["callbacks"][0]["init_args"]["every_n_train_steps"] == 125  # save_steps 0.5
    assert out["data"]["max_prompt_length"] == 256 and out["data"]["chat_template"] == "conversations"
    assert noted(result.notes, "optim") and noted(result.notes, "vllm_gpu_memory_utilization")
    assert any(n.startswith("unsloth_num_chunks=-1 left out: not a field of TRL") for n in result.notes)


def test_launcher_keys_say_what_to_set_instead():
    result = convert(read_trl_file(FIXTURES / "trl_docs_cli.yaml"))
    for key in ("num_processes", "accelerate_config"):
        note = next(n for n in result.notes if n.startswith(f"{key}="))
        assert "a launcher's key" in note and "trainer.devices" in note and "trainer.strategy" in note
    assert "torch_compile" not in " ".join(result.notes)  # no hint to the nearest spelling of another field


def test_mixtures_in_trl_s_form_and_the_recipe_s_become_data_mixture():
    data = convert(read_trl_file(FIXTURES / "trl_docs_mixture.yaml")).config["data"]
    assert data["mixture"] == {"datasets": [{"path": "trl-lib/DeepMath-103K"}]}
    two = {"datasets": [{"path": "json", "data_files": "a.jsonl", "columns": ["prompt"]}, {"path": "org/b"}]}
    result = convert({**two, "dataset_name": "org/c"})
    assert result.config["data"]["mixture"] == two and "path" not in result.config["data"]
    assert any(n.startswith("dataset_name='org/c' ignored: the dataset mixture is read") for n in result.notes)
    recipe = {"dataset_mixture": {"datasets": [{"id": "org/a", "config": "x", "weight": 0.3}, {"id": "org/b"}]}}
    assert convert(recipe).config["data"]["mixture"] == {
        "datasets": [{"path": "org/a", "name": "x", "weight": 0.3}, {"path": "org/b", "weight": 1.0}],
        "seed": 0,  # the recipe parser's defaults, written out: its shuffles
    }
    for bad, says in (
        ({"dataset_mixture": {"datasets": [{"id": "a", "columns": ["x"]}, {"id": "b", "columns": ["y"]}]}}, "differ"),
        ({"dataset_mixture": {"datasets": [{"path": "a"}]}}, "has no field 'path'"),
        ({"dataset_mixture": [{"id": "a"}]}, "must be a mapping with a datasets list"),
        ({"datasets": [{"path": "a", "weight": 1}]}, "datasets[0].weight is not a field of TRL's DatasetConfig"),
    ):
        with pytest.raises(ConversionError, match=re.escape(says)):
            convert(bad)


def test_older_names_yield_to_the_new_one_and_warmup_steps_wins():
    result = convert({"torch_dtype": "float16", "dtype": "bfloat16", "warmup_steps": 5, "warmup_ratio": 0.5})
    assert result.config["model"]["policy"]["dtype"] == "bfloat16"
    assert any(n.startswith("torch_dtype='float16' ignored: dtype") for n in result.notes)
    assert result.config["model"]["optimizer"]["warmup_steps"] == 5
    assert any(n.startswith("warmup_ratio=0.5 ignored: warmup_steps > 0 wins") for n in result.notes)
    with pytest.raises(ConversionError, match=r"warmup_ratio=1.5 must be a share of the run's steps in \[0, 1\)"):
        convert({"warmup_ratio": 1.5})


def test_output_that_is_the_input_a_folder_or_unwritable_is_one_line(tmp_path, capsys):
    source = tmp_path / "trl.yaml"
    source.write_text("num_generations: 4\n")
    cases = {
        str(source): "is the TRL config being converted: it is never overwritten",
        str(tmp_path / "." / "trl.yaml"): "is the TRL config being converted",
        str(tmp_path): "is a folder; give a file, e.g. -o",
        str(tmp_path / "missing" / "out.yaml"): "cannot write -o",
    }
    for output, message in cases.items():
        with pytest.raises(SystemExit) as stop:
            main([str(source), "-o", output])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if "error:" in line]
        assert len(errors) == 1 and message in errors[0] and "Traceback" not in err, output
    assert source.read_text() == "num_generations: 4\n"  # never overwritten


def test_fit_accepts_a_converted_recipe(tmp_path, capsys):
    out = tmp_path / "infgrpo.yaml"
    assert main([str(FIXTURES / "open_r1_recipe.yaml"), "-o", str(out)]) == 0
    assert "note: torch_dtype='bfloat16' read as dtype" in capsys.readouterr().err
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    offline_flags = ["--model.policy.model_name_or_path", "tiny", "--data.path", "tiny", "--data.config_name", "null"]
    cmd = [sys.executable, "-m", "infgrpo.fit", "--config", str(out), *offline_flags, "--print_config"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = yaml.safe_load(proc.stdout)
    assert printed["data"]["prompt_column"] == "problem" and printed["data"]["max_prompt_length"] == 512
    assert printed["model"]["rewards"]["functions"] == {"open_r1_accuracy": 1.0, "open_r1_format": 1.0}
