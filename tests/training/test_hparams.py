"""GRPOModule's settings in groups: each checked where it is built (types included), errors naming the dotted
key; one seed; checkpoints of infgrpo 0.1 (flat hyper-parameters) resume and load."""

import dataclasses
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from infgrpo import (
    GRPOModule,
    LoRAConfig,
    Objective,
    OptimizerConfig,
    PolicyConfig,
    RewardConfig,
    SamplerConfig,
    UpdateConfig,
)
from infgrpo.data import PromptDataModule
from infgrpo.settings import ConfigError, build_group, check_types, describe
from infgrpo.training.compat_v01 import FLAT_ONLY, MOVED, group_flat_hparams, is_flat
from infgrpo.training.hparams import GROUPS, check_settings
from infgrpo.upgrade_checkpoint import main as upgrade_main
from tests.helpers import trainer

V01 = Path(__file__).resolve().parents[1] / "fixtures" / "v01"


@pytest.mark.parametrize(
    "build,message",
    [
        (lambda: SamplerConfig(temperature="1.0"), "temperature='1.0' must be a number"),
        (lambda: SamplerConfig(num_slots="8"), "num_slots='8' must be an integer >= 1 or 'auto'"),
        (lambda: SamplerConfig(stop_token_ids=[1, "2"]), r"stop_token_ids=\[1, '2'\] must be a list of integers"),
        (lambda: SamplerConfig(refill="sjf2"), "refill='sjf2' is not known; valid: fifo, sjf, lpt, planned"),
        (lambda: PromptDataModule(batch_size="8"), "data.batch_size='8' must be an integer"),
        (lambda: PromptDataModule(long_prompts="drop"), "data.long_prompts='drop' is not known; valid: error, skip"),
        (lambda: PromptDataModule(eval_batch_size=0), "data.eval_batch_size=0 must be >= 1"),
        (lambda: RewardConfig(functions=["synthetic"]), "functions=\\['synthetic'\\] must be a mapping of strings"),
        (lambda: RewardConfig(functions={"synthetic": "1"}), "must be a mapping of strings to numbers"),
        (lambda: LoRAConfig(r=4.0), "r=4.0 must be an integer"),
        (lambda: OptimizerConfig(learning_rate=-1), "learning_rate=-1 must be a finite number > 0"),
        (lambda: OptimizerConfig(max_grad_norm=float("nan")), "max_grad_norm=nan must be a finite number >= 0"),
        (lambda: Objective(epsilon_low=2), r"epsilon_low=2 must be in \[0, 1\)"),
        (lambda: Objective(mask_truncated_completions="yes"), "mask_truncated_completions='yes' must be true or false"),
        (lambda: UpdateConfig(share_prompt=True), "share_prompt=True is not known; valid: auto, on, off"),
        (lambda: PolicyConfig(model_name_or_path=" "), "model_name_or_path='' must name a model"),
    ],
)
def test_each_group_checks_its_fields_and_types_where_it_is_built(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


def test_module_errors_name_the_group_and_come_before_anything_loads():
    missing = {"model_name_or_path": "no/such-model"}  # loading it would fail: every check must come first
    cases = [
        (dict(sampler={"temperature": "1.0"}), "sampler.temperature='1.0' must be a number"),
        (dict(optimizer={"learning_rate": -1}), "optimizer.learning_rate=-1 must be"),
        (dict(objective={"epsilon_low": 2}), "objective.epsilon_low=2 must be in"),
        (dict(update={"token_budget": 0}), "token_budget=0; valid"),
        (dict(lora={"rank": 4}), "lora.rank is not a setting of lora; valid: r, alpha, dropout, target_modules"),
        (dict(rewards=["synthetic"]), r"rewards=\['synthetic'\] must be a RewardConfig or a mapping of its fields"),
        (dict(rewards={"synthetic": 1.0}), "reward functions and weights go in rewards.functions"),
        # the misspelt name is named, not the accuracy reward beside it
        (dict(rewards={"functions": {"sythetic": 1.0}}), "rewards.functions: 'sythetic' is not known"),
        (dict(rewards={"functions": {"math": 1.0}}), "rewards.accuracy='synthetic' must be one of functions: math"),
        (dict(quantization={"load_in_4bit": True}), "quantization.load_in_4bit=True needs LoRA"),
        (dict(group_size="8"), "group_size='8' must be an integer >= 2"),
        (dict(seed="0"), "seed='0' must be an integer, or null"),
        (dict(threads=0), "threads=0 is not valid"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigError, match=message):
            GRPOModule(policy=missing, **kwargs)
    with pytest.raises(TypeError, match="unexpected keyword argument 'lora_r'"):
        GRPOModule(lora_r=4)  # a flat key of 0.1 is no alias (Python's own message; the CLI names lora.r)


def test_groups_given_as_instances_mappings_or_none_build_the_same_settings():
    a = check_settings(lora=LoRAConfig(r=4), objective=Objective(loss_type="dapo"), sampler=None)
    b = check_settings(lora={"r": 4}, objective={"loss_type": "dapo"})
    assert a == b and a.sampler == SamplerConfig() and a.lora.r == 4
    given = LoRAConfig(r=2)
    assert build_group(LoRAConfig, given, "lora") is not given  # copied: the caller's instance is not shared
    hp = b.hparams()
    assert set(hp) == {*GROUPS, "group_size", "output_dir", "seed", "threads"}
    assert hp["objective"]["loss_type"] == "dapo" and isinstance(hp["sampler"], dict)
    assert check_settings(**{k: v for k, v in hp.items()}) == b  # the saved form builds the same settings


def test_types_are_described_in_words():
    assert describe(int | None) == "an integer or null"
    assert describe(dict[str, float]) == "a mapping of strings to numbers"
    assert describe(list[int]) == "a list of integers"

    @dataclasses.dataclass
    class Flags:
        on: bool = False

    with pytest.raises(ConfigError, match="on=1 must be true or false"):
        check_types(Flags(on=1))


def test_every_flat_key_of_0_1_moved_into_a_group_and_the_docs_list_it():
    fields = {g: {f.name for f in dataclasses.fields(cls)} for g, cls in GROUPS.items()}
    for new in MOVED.values():
        group, name = new.split(".")
        assert name in fields[group], new
    assert len(MOVED) + len({"group_size", "sampler", "output_dir", "seed", "threads"}) == 61
    assert FLAT_ONLY == set(MOVED) - set(GROUPS)  # the keys no group is named after
    doc = (Path(__file__).resolve().parents[2] / "docs" / "migration-0.2.md").read_text()
    for old, new in MOVED.items():
        assert f"| `model.{old}` | `model.{new}` |" in doc


def test_seeds_left_null_follow_seed_everything_and_explicit_ones_win():
    small = dict(group_size=2, sampler={"num_slots": 2, "max_new_tokens": 4})
    L.seed_everything(7)
    try:
        assert GRPOModule(**small).settings.seed == 7 and GRPOModule(**small).hparams.seed == 7
        assert GRPOModule(**small, seed=3).settings.seed == 3
        assert PromptDataModule().hparams.seed == 7 and PromptDataModule(seed=1).hparams.seed == 1
    finally:
        L.seed_everything(0)


def test_a_data_seed_apart_from_the_rollout_seed_is_logged_as_data_seed(tmp_path):
    """Lightning logs the module's and the data module's settings as one dict and refuses one key with two values."""
    small = dict(group_size=2, sampler={"num_slots": 2, "max_new_tokens": 4})
    module, data = GRPOModule(**small, seed=1), PromptDataModule(path="tiny", batch_size=2, eval_split=None, seed=2)
    logger = L.pytorch.loggers.CSVLogger(tmp_path)
    L.Trainer(max_steps=1, accelerator="cpu", logger=logger, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, limit_val_batches=0).fit(module, data)  # fmt: skip
    logged = yaml.safe_load(Path(logger.log_dir, "hparams.yaml").read_text())
    assert (logged["seed"], logged["data_seed"]) == (1, 2)
    assert data.hparams.seed == 2  # the setting keeps its name where it is read (checkpoints, data.seed)


def test_flat_hyper_parameters_of_0_1_map_to_the_groups():
    old = torch.load(V01 / "step2.ckpt", weights_only=True)["hyper_parameters"]
    assert is_flat(old) and "lora_r" in old
    grouped = group_flat_hparams(old)
    assert not is_flat(grouped)
    assert grouped["policy"]["dtype"] == "float64" and grouped["objective"]["loss_type"] == "dapo"
    assert grouped["rewards"] == {"functions": {"synthetic": 1.0}, "accuracy": "synthetic", "on_error": "raise"}
    assert grouped["optimizer"]["learning_rate"] == 1e-2 and grouped["sampler"]["max_new_tokens"] == 8
    assert group_flat_hparams(grouped) == grouped  # grouped ones come back unchanged


def grouped_v01(**extra):
    """The 0.1 fixture's settings, written with the groups."""
    return dict(
        policy={"model_name_or_path": str(V01 / "model"), "dtype": "float64"}, group_size=2,
        sampler=SamplerConfig(num_slots=2, max_new_tokens=8), optimizer={"learning_rate": 1e-2},
        objective={"loss_type": "dapo", "epsilon_high": 0.28}, threads=1, **extra,
    )  # fmt: skip


def test_a_checkpoint_of_0_1_resumes_to_the_parameters_of_an_uninterrupted_run(tmp_path):
    """The fixture: 2 steps by infgrpo 0.1 (flat settings). 2 more here equal 4 uninterrupted steps here."""
    data = dict(path="tiny", batch_size=2, eval_split=None, tokenizer=str(V01 / "model"))
    L.seed_everything(0)
    straight = GRPOModule(**grouped_v01())
    trainer(tmp_path / "a", 4).fit(straight, PromptDataModule(**data))
    L.seed_everything(0)
    resumed = GRPOModule(**grouped_v01())
    trainer(tmp_path / "b", 4).fit(resumed, PromptDataModule(**data), ckpt_path=str(V01 / "step2.ckpt"))
    assert resumed.sampler.calls == 4
    for (name, a), b in zip(straight.policy.state_dict().items(), resumed.policy.state_dict().values(), strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-9), name  # float64; 0.1 wrote the first half (another CPU)


def test_a_0_1_checkpoint_loads_once_upgraded_and_names_the_command_until_then(tmp_path, capsys):
    policy = {"model_name_or_path": str(V01 / "model"), "dtype": "float64"}  # the fixture's folder, here
    with pytest.raises(ConfigError, match=r"step2.ckpt is a checkpoint of infgrpo 0.1 .* python -m infgrpo.upgrade_ch"):
        GRPOModule.load_from_checkpoint(V01 / "step2.ckpt", policy=policy)
    upgrade_main([str(V01 / "step2.ckpt"), str(tmp_path / "v02.ckpt")])
    assert "settings in the groups" in capsys.readouterr().out and not list(tmp_path.glob("*.tmp*"))
    with pytest.raises(SystemExit):  # already grouped: nothing to upgrade, one line
        upgrade_main([str(tmp_path / "v02.ckpt"), str(tmp_path / "again.ckpt")])
    assert "nothing to upgrade: no hyper-parameters of infgrpo 0.1, and no frozen base" in capsys.readouterr().err
    module = GRPOModule.load_from_checkpoint(tmp_path / "v02.ckpt", policy=policy)
    s = module.settings
    assert (s.objective.loss_type, s.objective.epsilon_high, s.optimizer.learning_rate) == ("dapo", 0.28, 1e-2)
    assert (s.group_size, s.sampler.max_new_tokens, s.threads, s.seed) == (2, 8, 1, 0)
    saved = torch.load(V01 / "step2.ckpt", weights_only=True)["state_dict"]
    for name, value in module.state_dict().items():
        assert torch.equal(value, saved[name]), name


def test_upgrade_checkpoint_says_in_one_line_what_ckpt_path_says_of_a_file_that_is_no_checkpoint(tmp_path, capsys):
    text, cut = tmp_path / "notes.txt", tmp_path / "cut.ckpt"
    text.write_text("hello")
    cut.write_bytes((V01 / "step2.ckpt").read_bytes()[:10_000])  # a copy cut short
    for source, said in [
        (text, "notes.txt is not a checkpoint written by Lightning"),
        (cut, "cut.ckpt is incomplete: it starts as a torch.save archive but its end is missing (10,000 bytes)"),
        (tmp_path / "gone.ckpt", "gone.ckpt is no file"),
    ]:
        with pytest.raises(SystemExit):
            upgrade_main([str(source), str(tmp_path / "out.ckpt")])
        lines = capsys.readouterr().err.strip().splitlines()
        assert said in lines[-1] and lines[-1].startswith("python -m infgrpo.upgrade_checkpoint: error:"), lines
    assert not (tmp_path / "out.ckpt").exists()
