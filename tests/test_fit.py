import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from infgrpo.fit import main
from infgrpo.training.preflight.checkpoints import find_last_checkpoint

pytestmark = pytest.mark.slow  # spawns processes or runs whole fits: `pytest -m "not slow"` leaves it out

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
QUICK = [
    "--trainer.max_steps",
    "2",
    "--model.group_size",
    "2",
    "--model.sampler.max_new_tokens",
    "16",
    "--data.eval_size",
    "8",
    "--trainer.log_every_n_steps",
    "1",
    "--trainer.val_check_interval",
    "2",
    "--model.logging.log_completions_every_n_steps",
    "1",
]


# Real configs name hub models and datasets; offline, tests swap in the shipped tiny ones.
LOCAL = [
    "--model.policy.model_name_or_path",
    "tiny",
    "--model.policy.dtype",
    "float32",
    "--model.quantization.bnb_4bit_compute_dtype",
    "float32",
    "--model.rewards.functions",
    "{synthetic: 1.0}",
    "--model.rewards.accuracy",
    "synthetic",
    "--model.output_dir",
    "null",
    "--data.path",
    "tiny",
    "--data.config_name",
    "null",
    "--data.prompt_column",
    "prompt",
    "--data.answer_column",
    "null",
    "--data.prompt_template",
    "null",
    "--data.eval_split",
    "eval",
    "--trainer.accelerator",
    "cpu",
    "--trainer.devices",
    "1",
    "--trainer.strategy",
    "auto",  # configs/qwen3-8b-fsdp2.yaml in one process (a sharded fit here would leave its process group and
    # its port to the later tests' processes; tests/test_sharded.py runs fsdp2 in processes of its own)
]


# A hub vision-language config runs offline on the shipped tiny Qwen2.5-VL and its shapes rows (TRL's format, images in
# the parquet), with its processor's own pixel settings (the config's are for a 3B model's 28-pixel tokens).
LOCAL_VISION = [
    *LOCAL,
    "--model.policy.model_name_or_path",
    "tiny-vl",
    "--model.rewards.functions",
    "{infgrpo.assets.shapes:correct: 1.0}",
    "--model.rewards.accuracy",
    "infgrpo.assets.shapes:correct",
    "--data.path",
    str(ROOT / "infgrpo" / "assets" / "tiny-shapes"),
    "--data.system_prompt",
    "null",
    "--data.processor_kwargs",
    "null",
    "--data.eval_fraction",
    "0",
    "--data.train_size",
    "4",
]
VISION = ("qwen2.5-vl.yaml",)


OFFLINE = ("tiny.yaml", "smollm2-cpu.yaml", "agent-calculator.yaml", "vlm-tiny.yaml")  # these run as they are: no hub
# smollm2-cpu.yaml loads a real 135M model: its two steps shrunk to 2 prompts, 8 new tokens, 2 held-out prompts
SMALLER = {
    "smollm2-cpu.yaml": ["--data.batch_size", "2", "--model.sampler.num_slots", "4", "--model.sampler.max_new_tokens",
                         "8", "--data.eval_size", "2"],
    "vlm-tiny.yaml": ["--data.batch_size", "2", "--data.train_size", "4", "--model.sampler.num_slots", "4",
                      "--model.sampler.max_new_tokens", "8", "--data.eval_size", "2"],  # encodes 4 + 2 image prompts
}  # fmt: skip


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_every_config_runs_and_ends_with_its_last_step_in_a_file(config, tmp_path, capsys):
    if config.name in VISION:
        pytest.skip("a hub vision-language config: parsed and checked before loading on tiny-vl (the test below)")
    local = [] if config.name in OFFLINE else LOCAL
    # 3 steps, evaluated at step 2: the last step is on no config's checkpoint or evaluation schedule (issue #60: a
    # run stopped between two of them kept only the earlier one, or nothing)
    quick = [*QUICK, *SMALLER.get(config.name, []), "--trainer.max_steps", "3"]
    cli = main(["--config", str(config), "--trainer.default_root_dir", str(tmp_path), *local, *quick])
    assert cli.trainer.global_step == 3
    lora = {"tiny.yaml": 0, "qwen3.yaml": 16, "smollm2.yaml": 32, "smollm2-cpu.yaml": 16, "qwen3-8b-fsdp2.yaml": 0}
    lora["agent-calculator.yaml"], lora["vlm-tiny.yaml"] = 0, 16
    assert cli.model.hparams.lora["r"] == lora[config.name] == cli.model.settings.lora.r
    last = find_last_checkpoint([tmp_path])  # what --ckpt_path last resumes
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith(f"[infgrpo] done after step 3: checkpoint {last}")
    saved, trained = torch.load(last, weights_only=True), cli.model.state_dict()
    assert saved["global_step"] == 3 and all(torch.equal(v, trained[k]) for k, v in saved["state_dict"].items())
    if cli.model.settings.output_dir:  # smollm2-cpu.yaml: the adapter too
        assert line.endswith(f"; the trained adapter in {tmp_path / 'adapter'}")
        assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()


@pytest.mark.parametrize("config", VISION)
def test_a_hub_vision_config_parses_and_passes_every_check_before_loading(config, monkeypatch, capsys):
    """Runs the command line up to the model's loading: the parser, then the preflight's steps on the parsed config
    (the model's config, the first rows through tiny-vl's processor, the rewards' columns). A run on tiny-vl costs
    ~40 s here (4-bit on a CPU), and configs/vlm-tiny.yaml already runs the same path."""
    from infgrpo.fit import GRPOCLI

    def loaded(self):
        raise SystemExit(0)  # the checks passed; the next thing would load the model

    monkeypatch.setattr(GRPOCLI, "instantiate_classes", loaded)
    with pytest.raises(SystemExit) as stop:
        main(["--config", str(ROOT / "configs" / config), *LOCAL_VISION, "--model.sampler.max_new_tokens", "16"])
    assert stop.value.code == 0, capsys.readouterr().err
    cfg = yaml.safe_load((ROOT / "configs" / config).read_text())  # what the swap leaves is the config's own
    assert cfg["model"]["quantization"]["load_in_4bit"] and cfg["model"]["lora"]["r"] == 16
    assert set(cfg["data"]["processor_kwargs"]) == {"min_pixels", "max_pixels"}


def test_the_gpu_configs_keep_a_bounded_number_of_checkpoints(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tests.callbacks.test_final_checkpoint import fit

    for config in CONFIGS:
        cfg = yaml.safe_load(config.read_text())
        if cfg["trainer"]["accelerator"] != "gpu":
            continue
        [spec] = [c["init_args"] for c in cfg["trainer"]["callbacks"] if c["class_path"].endswith("ModelCheckpoint")]
        folder, every = tmp_path / config.stem, 2  # the config's callback, saving every 2 steps of a one-weight model
        saves = ModelCheckpoint(dirpath=folder, **{**spec, "every_n_train_steps": every})
        final, _ = fit(folder, 4 * every + 1, [saves])  # 4 saves on the schedule, then one more step
        kept = sorted(p.name for p in folder.iterdir())
        newest = [f"epoch=0-step={k * every}.ckpt" for k in range(5 - spec["save_top_k"], 5)]
        assert kept == sorted([*newest, "last.ckpt"]), config.name
        assert torch.load(final.path, weights_only=True)["global_step"] == 4 * every + 1  # a file, not a link now
        assert torch.load(folder / newest[-1], weights_only=True)["global_step"] == 4 * every  # not through the link


def test_overrides_logs_checkpoints_and_repeated_runs(tmp_path):
    args = [
        "--config",
        str(ROOT / "configs" / "tiny.yaml"),
        "--trainer.default_root_dir",
        str(tmp_path),
        *QUICK,
    ]
    first = main(args)
    second = main(args)  # same folder again: a new version, no failure
    assert first.model.hparams.group_size == 2 and first.model.sampler.config.max_new_tokens == 16
    bar = first.trainer.progress_bar_callback  # Lightning's rich bar would say "Epoch 0/-2" (max_epochs -1)
    assert type(bar).__name__ == "StepProgressBar" and bar._get_train_description(0).strip() == "Epoch 0"
    logs = sorted(tmp_path.glob("grpo/version_*/metrics.csv"))
    assert len(logs) == 2
    assert len(list(tmp_path.glob("grpo/version_*/events.out.tfevents.*"))) == 2  # TensorBoard beside CSV
    rows = list(csv.DictReader(logs[0].open()))
    assert any(r.get("train/reward") for r in rows) and any(r.get("val/accuracy") for r in rows)
    table = list(csv.DictReader((logs[0].parent / "completions.csv").open()))
    assert table and {"step", "prompt", "completion", "reward"} <= set(table[0])
    ckpts = list(Path(second.trainer.checkpoint_callback.dirpath).glob("*.ckpt"))
    assert ckpts
    resumed = main([*args, "--trainer.max_steps", "4", "--ckpt_path", str(ckpts[0])])
    assert resumed.trainer.global_step == 4 and resumed.model.sampler.calls == 4


def option_help(out: str) -> dict[str, str]:
    """``--flag`` -> its help text without the ``(type: ...)`` suffix, read from argparse's help output."""
    blocks: dict[str, str] = {}
    flag = None
    for line in out.splitlines():
        if line.startswith("  --"):
            parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)  # "--flag METAVAR" [+ "  help starts"]
            flag = parts[0].split()[0].rstrip(",")
            blocks[flag] = parts[1] if len(parts) == 2 else ""
        elif flag and line.startswith(" " * 24):
            blocks[flag] += " " + line.strip()
        else:
            flag = None
    return {k: " ".join(v.split("(type:")[0].split()) for k, v in blocks.items()}


def test_help_reads_well_and_documents_every_field():
    import dataclasses
    import inspect

    from infgrpo import GRPOModule
    from infgrpo.data import PromptDataModule
    from infgrpo.training.hparams import GROUPS

    out = subprocess.run(
        [sys.executable, "-m", "infgrpo.fit", "--help"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    assert out.startswith("usage: python -m infgrpo.fit [-h] [-c CONFIG.yaml]")
    assert "GRPO" in out.split("options:")[0]  # a description of what the command does
    assert "examples:\n  python -m infgrpo.fit -c configs/tiny.yaml" in out
    assert "--optimizer" not in out and "--lr_scheduler" not in out  # the module builds its own AdamW
    assert "(type: Union[bool, int], default: 0)" in out  # a fixed seed unless the config says otherwise
    helps = option_help(out)
    fields = [f"--model.{n}" for n in inspect.signature(GRPOModule).parameters if n not in GROUPS]
    fields += [f"--model.{g}.{f.name}" for g, cls in GROUPS.items() for f in dataclasses.fields(cls)]
    linked = ("tokenizer", "gguf_file")  # set from --model.policy.model_name_or_path and --model.policy.gguf_file
    fields += [f"--data.{n}" for n in inspect.signature(PromptDataModule).parameters if n not in linked]
    assert len(fields) > 50
    for flag in fields:
        assert flag in helps, f"{flag} is not in --help"
        assert len(helps[flag].split()) >= 3, f"{flag} has no help text: {helps[flag]!r}"
    assert "Sequences decoded at once" in helps["--model.sampler.num_slots"]


def cli_error(capsys, *args):
    """The ``error:`` line of a run of ``python -m infgrpo.fit`` that the parser stops (exit status 2)."""
    with pytest.raises(SystemExit) as stop:
        main(list(args))
    assert stop.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_flat_config_of_0_1_names_where_each_key_moved(tmp_path, capsys):
    old = tmp_path / "old.yaml"
    old.write_text("model:\n  model: tiny\n  group_size: 2\n  loss_type: dapo\n")
    line = cli_error(capsys, "--config", str(old))
    assert f"2 keys of infgrpo 0.1 in {old}: model.model is model.policy.model_name_or_path, " in line
    assert "model.loss_type is model.objective.loss_type now" in line  # every old key, in one line
    line = cli_error(capsys, "--config", str(ROOT / "configs" / "tiny.yaml"), "--model.learning_rate", "1e-3")
    assert "model.learning_rate (--model.learning_rate) is model.optimizer.learning_rate now" in line
    weights = tmp_path / "weights.yaml"
    weights.write_text("model:\n  rewards: {synthetic: 1.0}\n")
    assert "they go in model.rewards.functions now" in cli_error(capsys, "--config", str(weights))


@pytest.mark.parametrize(
    "flag,value,message",
    [
        ("--model.optimizer.learning_rate", "-1", "model.optimizer.learning_rate=-1.0 must be a finite number > 0"),
        ("--model.objective.epsilon_low", "2", "model.objective.epsilon_low=2.0 must be in [0, 1)"),
        ("--model.rewards.functions", "{sythetic: 1.0}", "model.rewards.functions: 'sythetic' is not known"),
        ("--model.sampler.top_p", "1.5", "model.sampler.top_p=1.5 must be in (0, 1]"),
        ("--model.group_size", "1", "model.group_size=1 must be an integer >= 2"),
        ("--data.batch_size", "0", "data.batch_size=0 must be >= 1"),
        ("--data.path", "reasoning_gym:no_such_task", "data.path='reasoning_gym:no_such_task'"),
    ],
)
def test_a_bad_setting_is_one_error_line_before_anything_loads(capsys, flag, value, message):
    # the model does not exist: any error about it would mean the settings were checked too late
    args = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--model.policy.model_name_or_path", "no/such-model"]
    assert message in cli_error(capsys, *args, flag, value)


def test_seed_everything_seeds_the_rollouts_and_the_data_order_unless_they_are_set(tmp_path, capsys):
    tiny = ["--config", str(ROOT / "configs" / "tiny.yaml")]
    with pytest.raises(SystemExit):
        main([*tiny, "--seed_everything", "5", "--data.seed", "2", "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert (printed["seed_everything"], printed["model"]["seed"], printed["data"]["seed"]) == (5, 5, 2)
    cli = main([*tiny, "--seed_everything", "5", "--trainer.default_root_dir", str(tmp_path), *QUICK])
    assert cli.model.settings.seed == 5 and cli.datamodule.hparams.seed == 5
    ckpt = next(Path(cli.trainer.checkpoint_callback.dirpath).glob("*.ckpt"))
    saved = torch.load(ckpt, weights_only=True)
    assert saved["hyper_parameters"]["seed"] == 5 and saved["datamodule_hyper_parameters"]["seed"] == 5
