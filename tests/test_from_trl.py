"""``infgrpo.from_trl``: TRL 1.16's GRPOConfig (and its command line's model, dataset and reward fields) to an infgrpo
config that ``python -m infgrpo.fit`` accepts; every TRL field in the table, nothing set dropped silently."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

trl = pytest.importorskip("trl")
from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig  # noqa: E402
from trl.scripts.grpo import GRPOScriptArguments  # noqa: E402

from infgrpo.data.datamodule import check_data_settings  # noqa: E402
from infgrpo.from_trl import (  # noqa: E402
    OTHER_KEYS,
    RENAMED,
    TRANSFORMS,
    TRL_FIELDS,
    ConversionError,
    convert,
    infgrpo_default,
    main,
    markdown_table,
)
from infgrpo.training.hparams import check_settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def unmapped_notes(notes: list[str]) -> list[str]:
    return [n for n in notes if " not mapped: " in n]


def test_every_field_of_trl_grpo_config_is_in_the_table():
    assert trl.__version__ == "1.16.0"
    grpo = names(GRPOConfig)
    assert len(grpo) > 180 and not grpo - set(TRL_FIELDS)  # TrainingArguments' fields included
    cli = names(ModelConfig) | names(GRPOScriptArguments) | names(DatasetMixtureConfig)
    assert not cli - set(TRL_FIELDS)
    assert set(TRL_FIELDS) == grpo | cli | {"env"}  # nothing that TRL does not have


def test_every_target_is_an_infgrpo_key_or_a_reason():
    for name, target in TRL_FIELDS.items():
        if isinstance(target, str):
            assert len(target.split()) >= 4, (name, target)  # a reason, not a key
            continue
        for key in target:
            infgrpo_default(key)  # a KeyError for a key python -m infgrpo.fit lacks
        assert name in TRANSFORMS or len(target) == 1, name  # copied as is to its one key, or transformed
    assert all(isinstance({**TRL_FIELDS, **OTHER_KEYS}[name], tuple) for name in TRANSFORMS)
    for name, target in OTHER_KEYS.items():  # the keys of real files that TRL 1.16 lacks
        assert name not in TRL_FIELDS and name not in RENAMED, name
        assert isinstance(target, str) or name in TRANSFORMS or len(target) == 1, name
        for key in target if isinstance(target, tuple) else ():
            infgrpo_default(key)
    assert set(RENAMED.values()) <= set(TRL_FIELDS) and not set(RENAMED) & set(TRL_FIELDS)
    with pytest.raises(KeyError):
        infgrpo_default("model.sampler.max_completion_length")


def test_a_grpo_config_object_converts_to_the_keys_it_sets(tmp_path):
    config = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        report_to=[],
        num_generations=4,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        max_completion_length=64,
        temperature=0.7,
        learning_rate=3e-6,
        lr_scheduler_type="cosine",
        warmup_steps=3,
        epsilon=0.3,
        beta=0.04,
        loss_type="grpo",
        scale_rewards=False,
        max_steps=30,
        seed=7,
        logging_steps=5,
        save_steps=10,
        gradient_checkpointing=False,
        chat_template_kwargs={"enable_thinking": False},
        log_completions=True,
        num_completions_to_print=3,
    )
    result = convert(config)
    out = result.config
    assert out["seed_everything"] == 7
    assert out["trainer"]["max_steps"] == 30 and "max_epochs" not in out["trainer"]
    assert out["trainer"]["accelerator"] == "cpu" and out["trainer"]["log_every_n_steps"] == 5
    assert out["trainer"]["default_root_dir"] == str(tmp_path / "out") and out["model"]["output_dir"] == "."
    checkpoint = out["trainer"]["callbacks"][0]
    assert checkpoint["class_path"] == "lightning.pytorch.callbacks.ModelCheckpoint"
    assert checkpoint["init_args"] == {"every_n_train_steps": 10, "save_last": True, "save_top_k": -1}
    model = out["model"]
    assert model["group_size"] == 4 and model["sampler"] == {"max_new_tokens": 64, "temperature": 0.7}
    assert model["objective"] == {
        "loss_type": "grpo",
        "epsilon_low": 0.3,
        "epsilon_high": 0.3,  # TRL's None: epsilon
        "beta": 0.04,
        "scale_rewards": "none",
    }
    assert model["optimizer"] == {"learning_rate": 3e-6, "warmup_steps": 3, "lr_scheduler_type": "cosine"}
    assert model["policy"] == {"gradient_checkpointing": False}  # bf16 without LoRA stays float32 (a note says so)
    assert model["logging"] == {"log_completions_every_n_steps": 5, "num_completions_to_log": 3}
    assert "rewards" not in model  # no reward_funcs (a note says so), and no blanket on_error
    assert "lora" not in model and "quantization" not in model
    assert out["data"] == {
        "eval_split": None,
        "batch_size": 4,
        "chat_template": "conversations",  # TRL's rule: string prompts as they are
        "chat_template_kwargs": {"enable_thinking": False},
    }
    assert list(out) == ["seed_everything", "trainer", "model", "data"]
    assert any(n.startswith("data.batch_size=4: per_device_train_batch_size=8 x gradient_acc") for n in result.notes)
    assert any(n.startswith("bf16=True is mixed precision over float32 weights") for n in result.notes)
    assert unmapped_notes(result.notes) == []  # what __post_init__ fills in (report_to, debug, ...) is no setting


def test_trl_defaults_that_differ_from_infgrpo_s_are_written_out():
    out = convert({"model_name_or_path": "tiny", "dataset_name": "tiny"}).config
    assert out["seed_everything"] == 42 and out["trainer"]["max_epochs"] == 3
    assert out["trainer"]["log_every_n_steps"] == 10
    assert out["model"]["objective"] == {"loss_type": "dapo"}
    assert out["model"]["optimizer"] == {"learning_rate": 1e-6, "lr_scheduler_type": "linear"}
    assert out["model"]["policy"]["gradient_checkpointing"] is True
    assert out["model"]["sampler"] == {"max_new_tokens": 512}


def test_a_set_field_without_an_infgrpo_key_is_named_with_its_reason():
    result = convert({"use_vllm": True, "vllm_gpu_memory_utilization": 0.5, "min_p": 0.1, "vllm_mode": "colocate"})
    notes = unmapped_notes(result.notes)
    assert any(n.startswith("use_vllm=True not mapped: vLLM serving: infgrpo decodes in-process") for n in notes)
    assert any(n.startswith("vllm_gpu_memory_utilization=0.5 not mapped: vLLM serving") for n in notes)
    assert any(n.startswith("min_p=0.1 not mapped: decoding option infgrpo's sampler lacks") for n in notes)
    assert not any(n.startswith("vllm_mode") for n in notes)  # TRL's default: nothing to say
    assert result.config["model"]["objective"]["rollout_correction"] == "sequence_mask"  # TRL corrects vLLM's
    assert unmapped_notes(convert({"use_vllm": False}).notes) == []


def test_rewards_resolve_as_trl_s_script_does_with_their_weights():
    rewards = convert(
        {
            "reward_model_name_or_path": "org/reward-model",
            "reward_funcs": ["accuracy_reward", "get_soft_overlong_punishment", "my_lib.rewards.custom"],
            "reward_weights": [0.5, 1, 0.1, 2],
        }
    ).config["model"]["rewards"]
    assert rewards == {
        "functions": {
            "org/reward-model": 0.5,  # TRL puts the reward model first
            "trl.rewards:accuracy_reward": 1.0,
            "trl.rewards:get_soft_overlong_punishment(max_completion_len=1280, soft_punish_cache=256)": 0.1,
            "my_lib.rewards:custom": 2.0,
        },
        "accuracy": "trl.rewards:accuracy_reward",
    }
    with pytest.raises(ConversionError, match="reward_weights has 1 weights for 2 rewards"):
        convert({"reward_funcs": ["accuracy_reward", "think_format_reward"], "reward_weights": [1.0]})
    with pytest.raises(ConversionError) as err:  # every name that resolves to nothing, in one line
        convert({"reward_funcs": ["tag_counts", "accuracy_reward", "brevity"]})
    line = str(err.value)
    assert "\n" not in line and line.startswith("reward_funcs: 'tag_counts', 'brevity' are neither TRL's names")
    assert "'tag_counts' -> the recipe function's import path, e.g. 'my_recipe.rewards:tag_counts_reward'" in line
    assert "'brevity' -> " in line and "get_cosine_scaled_reward, get_repetition_penalty_reward" in line
    with pytest.raises(ConversionError, match=r"'cosine_scaled' -> 'trl.rewards:get_cosine_scaled_reward\(<its arg"):
        convert({"reward_funcs": ["cosine_scaled"]})  # a name of the installed trl.rewards: its import path


def test_max_tool_calling_iterations_is_the_agent_s_max_turns():
    result = convert({"max_tool_calling_iterations": 4})
    assert result.config["model"]["agent"] == {"max_turns": 4}
    assert "agent:\n    max_turns: 4\n" in result.yaml()
    assert "agent" not in convert({"max_tool_calling_iterations": None}).config["model"]  # TRL's None: our default
    zero = convert({"max_tool_calling_iterations": 0})
    assert "agent" not in zero.config["model"]
    assert any(n.startswith("max_tool_calling_iterations=0 not mapped: TRL then parses") for n in zero.notes)
    with pytest.raises(ConversionError, match=r"max_tool_calling_iterations=-1 must be an integer >= 0"):
        convert({"max_tool_calling_iterations": -1})


def test_lora_and_4_bit_loading_follow_use_peft():
    model = convert({"lora_r": 32, "dtype": "bfloat16"}).config["model"]
    assert "lora" not in model and model["policy"]["dtype"] == "bfloat16"
    model = convert(
        {"use_peft": True, "lora_r": 32, "lora_target_modules": ["q_proj", "v_proj"], "load_in_4bit": True}
    ).config["model"]
    assert model["lora"] == {"r": 32, "alpha": 32, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]}
    assert model["quantization"] == {
        "load_in_4bit": True,
        "bnb_4bit_use_double_quant": False,
        "bnb_4bit_compute_dtype": "bfloat16",  # bf16 (TRL's default) with LoRA
    }


def test_an_unknown_key_is_named_and_left_out_and_refused_under_strict(tmp_path, capsys):
    result = convert({"lerning_rate": 1e-5, "seed": 1, "my_flag": True})
    assert "lerning_rate" not in str(result.config) and result.config["seed_everything"] == 1
    assert any(
        n.startswith("lerning_rate=1e-05 left out: not a field of TRL 1.16.0's GRPOConfig")
        and "(did you mean 'learning_rate'?)" in n
        and "TRL's parser ignores it too (--strict refuses it)" in n
        for n in result.notes
    )
    assert any(n.startswith("my_flag=True left out") and "did you mean" not in n for n in result.notes)
    with pytest.raises(ConversionError, match=r"unknown keys 'lerning_rate' \(did you mean 'learning_rate'\?\), 'x'"):
        convert({"lerning_rate": 1e-5, "seed": 1, "x": 2}, strict=True)
    path = tmp_path / "trl.json"
    path.write_text('{"num_generation": 8}')
    with pytest.raises(SystemExit) as stop:
        main([str(path), "--strict"])
    assert stop.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "unknown key 'num_generation' (did you mean 'num_generations'?)" in errors[0]
    assert main([str(path)]) == 0
    assert "note: num_generation=8 left out" in capsys.readouterr().err


def test_the_command_writes_a_config_that_fit_accepts(tmp_path, capsys):
    trl_config = {
        "model_name_or_path": "tiny",
        "dataset_name": "tiny",
        "reward_funcs": ["accuracy_reward"],
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "max_completion_length": 32,
        "max_steps": 4,
        "use_peft": True,
        "lora_r": 8,
        "lora_target_modules": "all-linear",
        "use_vllm": True,
        "output_dir": str(tmp_path / "out"),
        "chat_template_kwargs": {"enable_thinking": False},
    }
    (tmp_path / "trl.yaml").write_text(yaml.safe_dump(trl_config))
    out = tmp_path / "infgrpo.yaml"
    assert main([str(tmp_path / "trl.yaml"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "note: use_vllm=True not mapped: vLLM serving" in err
    text = out.read_text()
    assert text.startswith("# infgrpo config converted from TRL 1.16.0's GRPOConfig (trl.yaml)")
    assert "# - use_vllm=True not mapped: vLLM serving" in text
    config = yaml.safe_load(text)
    check_settings(**config["model"])  # every group builds and checks (the reward imports)
    check_data_settings(config["data"])
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "infgrpo.fit", "--config", str(out), "--print_config"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = yaml.safe_load(proc.stdout)
    assert printed["model"]["group_size"] == 4 and printed["model"]["lora"]["r"] == 8
    assert printed["data"]["batch_size"] == 2 and printed["data"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert printed["model"]["rewards"]["functions"] == {"trl.rewards:accuracy_reward": 1.0}


def test_the_docs_page_holds_the_table_as_rendered():
    page = (ROOT / "docs" / "from_trl.md").read_text()
    table = markdown_table()
    assert table in page
    assert page.count("| TRL | infgrpo | how |") == 1  # one table, the rendered one
