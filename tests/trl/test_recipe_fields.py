"""The fields of real recipes that need more than a copy: ``test_split_size`` (TRL's held-out share of a mixture),
``reward_funcs`` given as import paths (each checked, every bad one named at once) and TRL 1.16's batch rule."""

import json
import os
import sys

import pytest

pytest.importorskip("trl")
from trl import DatasetMixtureConfig, GRPOConfig, get_dataset  # noqa: E402
from trl.scripts.utils import DatasetConfig  # noqa: E402

from infgrpo.data import PromptDataModule  # noqa: E402
from infgrpo.data.datamodule import check_data_settings  # noqa: E402
from infgrpo.from_trl import HOW, ConversionError, convert  # noqa: E402
from infgrpo.trl.how import BATCH  # noqa: E402
from infgrpo.trl.names import trl_keys  # noqa: E402


def note(notes: list[str], start: str) -> str:
    return next(n for n in notes if n.startswith(start))


def test_a_mixture_s_test_split_size_holds_out_trl_s_count_of_rows_by_a_seeded_draw(tmp_path):
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"prompt": f"rev ab{i}"}) + "\n" for i in range(41)))
    mixture = {"datasets": [{"path": str(tmp_path), "split": "train"}], "test_split_size": 0.25}
    result = convert({**mixture, "eval_strategy": "steps", "eval_steps": 5})
    data = result.config["data"]
    assert data["mixture"] == {"datasets": [{"path": str(tmp_path)}], "test_split_size": 0.25}
    assert data["eval_split"] is None and "eval_size" not in data and "eval_fraction" not in data
    assert "drawn with data.seed (TRL's split is unseeded)" in note(result.notes, "test_split_size=0.25: ")
    check_data_settings(data)
    train, held_out = PromptDataModule(**data, seed=3).rows()
    trl_split = get_dataset(DatasetMixtureConfig(datasets=[DatasetConfig(path=str(tmp_path))], test_split_size=0.25))
    assert (len(train), len(held_out)) == (trl_split["train"].num_rows, trl_split["test"].num_rows) == (30, 11)
    assert sorted(r["prompt"] for r in train + held_out) == sorted(f"rev ab{i}" for i in range(41))
    again, other = PromptDataModule(**data, seed=3).rows()[1], PromptDataModule(**data, seed=4).rows()[1]
    assert again == held_out != other  # seeded: the same rows for a seed


def test_test_split_size_in_a_recipe_s_mixture_mapping_and_without_evaluation():
    recipe = {"dataset_mixture": {"datasets": [{"id": "org/a"}], "seed": 0, "test_split_size": 0.05}}
    result = convert(recipe)  # eval_strategy: TRL's default no: the rows leave training, none is scored
    data = result.config["data"]
    assert data["mixture"] == {"datasets": [{"path": "org/a", "weight": 1.0}], "seed": 0, "test_split_size": 0.05}
    assert (data["eval_split"], data["eval_size"]) == (None, 0)
    assert "eval_strategy=no: none scored" in note(result.notes, "dataset_mixture.test_split_size=0.05: ")


def test_test_split_size_as_rows_and_without_a_mixture_and_bad_values():
    rows = convert({"datasets": [{"path": "org/a", "split": "dev"}], "test_split_size": 500, "eval_strategy": "epoch"})
    assert rows.config["data"]["mixture"] == {"datasets": [{"path": "org/a", "split": "dev"}], "test_split_size": 500}
    alone = convert({"dataset_name": "org/a", "test_split_size": 0.1})  # TRL's script splits a mixture only
    assert "mixture" not in alone.config["data"]
    assert "TRL's grpo script splits a datasets mixture only" in note(alone.notes, "test_split_size=0.1 ignored: ")
    for bad in (1.5, 0, True, "0.1"):
        with pytest.raises(ConversionError, match=r"test_split_size=.* must be a share of the rows in \(0, 1\)"):
            convert({"datasets": [{"path": "org/a"}], "test_split_size": bad})


@pytest.fixture
def reward_modules(tmp_path, monkeypatch):
    """A working folder with a reward module, one that fails to import, and nothing else on ``sys.path``."""
    (tmp_path / "recipe_rewards_t53.py").write_text("LIMIT = 3\n\ndef accuracy(completions, **kw):\n    return []\n")
    (tmp_path / "broken_rewards_t53.py").write_text("raise RuntimeError('needs a GPU')\n")
    monkeypatch.chdir(tmp_path)
    yield
    for name in ("recipe_rewards_t53", "broken_rewards_t53"):
        sys.modules.pop(name, None)


@pytest.mark.usefixtures("reward_modules")
def test_reward_import_paths_are_checked_and_every_bad_one_named_at_once():
    good = convert({"reward_funcs": ["recipe_rewards_t53.accuracy", "elsewhere_t53.rewards.fn"]})
    assert good.config["model"]["rewards"]["functions"] == {
        "recipe_rewards_t53:accuracy": 1.0,
        "elsewhere_t53.rewards:fn": 1.0,  # not importable here: fit imports it where it runs
    }
    assert "elsewhere_t53 is not importable from this folder" in note(good.notes, "reward_funcs 'elsewhere_t53.")
    assert not any("recipe_rewards_t53" in n for n in good.notes)
    with pytest.raises(ConversionError) as err:
        convert(
            {
                "reward_funcs": [
                    "tag_counts",
                    "recipe_rewards_t53:acuracy",
                    "recipe_rewards_t53.LIMIT",
                    "broken_rewards_t53.score",
                    "trl.rewards.accuracy_rewardd",
                    "think_format_reward",
                ]
            }
        )
    line = str(err.value)
    assert "\n" not in line and line.startswith("reward_funcs: 'tag_counts' is neither TRL's names")
    assert "'recipe_rewards_t53:acuracy' does not import from this folder: recipe_rewards_t53 has no 'acuracy': " \
        "write 'recipe_rewards_t53:accuracy'" in line  # fmt: skip
    assert "'recipe_rewards_t53.LIMIT' does not import from this folder: recipe_rewards_t53.LIMIT is not callable " \
        "(int): name one of accuracy" in line  # fmt: skip
    assert "'broken_rewards_t53.score' does not import from this folder: importing broken_rewards_t53 raised " \
        "RuntimeError: needs a GPU" in line  # fmt: skip
    assert "'trl.rewards.accuracy_rewardd' does not import from this folder: trl.rewards has no 'accuracy_rewardd': " \
        "write 'trl.rewards:accuracy_reward'" in line  # fmt: skip
    assert line.count(" does not import from this folder: ") == 4 and "'think_format_reward'" not in line  # TRL's
    assert os.getcwd() not in sys.path  # the working folder was on it for the check only


def test_the_batch_note_says_what_trl_1_16_does():
    with pytest.raises(ValueError, match=r"generation_batch_size \(12\) must be divisible by num_generations \(8\)"):
        GRPOConfig(output_dir="unused", use_cpu=True, report_to=[], per_device_train_batch_size=12, num_generations=8)
    result = convert({"per_device_train_batch_size": 12, "num_generations": 8})
    line = note(result.notes, "data.batch_size=2: per_device_train_batch_size=12 x gradient_accumulation_steps=1")
    assert "12 is no multiple of num_generations=8, which TRL 1.16 refuses on one GPU" in line
    assert "TRL runs it on a multiple of 2 GPUs only, where a group spans GPUs (3 prompts a step on 2)" in line
    assert "no multiple" not in note(convert({"per_device_train_batch_size": 16}).notes, "data.batch_size=2: ")
    assert "on one GPU a group is never spread over GPUs" in BATCH and HOW["gradient_accumulation_steps"] == BATCH
    assert f"data.batch_size counts {BATCH}" in trl_keys(["--per_device_train_batch_size", "8"], {"data.batch_size"})
