"""``data.mixture``: TRL's ``datasets`` (checked against TRL's own ``get_dataset``) and a recipe's ``dataset_mixture``
(checked against its steps written here from its definition), local files and folders offline, one-line errors;
recipe prompts as conversations; a 2-step run on two files that resumes exactly."""

import json

import datasets
import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from trl import DatasetMixtureConfig, get_dataset
from trl.scripts.utils import DatasetConfig

from infgrpo import GRPOModule, OptimizerConfig, SamplerConfig
from infgrpo.data import PromptDataModule
from infgrpo.data.datamodule import check_data_settings
from infgrpo.data.mixture import DatasetMixture, as_mixture
from infgrpo.policy.load import load_tokenizer
from infgrpo.settings import ConfigError
from tests.helpers import trainer

TASKS = [json.loads(line) for line in open("infgrpo/assets/tiny-data/train.jsonl").readlines()[:60]]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two jsonl files of the tiny task with different extra columns, and a folder of split files."""
    root = tmp_path_factory.mktemp("mixture")
    a = [{"prompt": r["prompt"], "answer": r["answer"], "task": r["task"]} for r in TASKS[:36]]
    b = [{"prompt": r["prompt"], "answer": r["answer"], "level": i} for i, r in enumerate(TASKS[36:])]
    (root / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in a))
    (root / "folder").mkdir()
    (root / "folder" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in b))
    return root


def loaded(path):
    return datasets.load_dataset("json", data_files=str(path), split="train")


def test_two_local_sources_are_concatenate_datasets_of_the_two(files):
    mixture = {"datasets": [{"path": "json", "data_files": str(files / "a.jsonl")}, {"path": str(files / "folder")}]}
    train, held_out = PromptDataModule(mixture=mixture, eval_split=None).rows()
    assert (
        train
        == datasets.concatenate_datasets([loaded(files / "a.jsonl"), loaded(files / "folder/train.jsonl")]).to_list()
    )
    assert held_out == [] and train[0]["level"] is None and train[-1]["task"] is None  # missing columns: None
    kept = {
        "datasets": [
            {"path": str(files / "a.jsonl"), "columns": ["prompt", "answer"]},
            {"path": str(files / "folder"), "columns": ["answer", "prompt"]},
        ]
    }  # noqa: E501
    rows, _ = PromptDataModule(mixture=kept).rows()
    want = [loaded(files / "a.jsonl"), loaded(files / "folder/train.jsonl")]
    want = datasets.concatenate_datasets([d.select_columns(["prompt", "answer"]) for d in want]).to_list()
    assert rows == want and set(rows[0]) == {"prompt", "answer"}


def test_fraction_and_test_split_size_are_trl_s(files):
    sources = [DatasetConfig(path="json", data_files=str(files / "a.jsonl"), fraction=0.7),
               DatasetConfig(path=str(files / "folder"), fraction=0.3)]  # fmt: skip
    trl = get_dataset(DatasetMixtureConfig(datasets=sources))["train"].to_list()
    ours = {"datasets": [{"path": "json", "data_files": str(files / "a.jsonl"), "fraction": 0.7},
                         {"path": str(files / "folder"), "fraction": 0.3}]}  # fmt: skip
    assert PromptDataModule(mixture=ours).rows()[0] == trl and len(trl) == 36 + 15  # the first rows of each
    split = get_dataset(DatasetMixtureConfig(datasets=sources, test_split_size=0.15))
    train, held_out = PromptDataModule(mixture={**ours, "test_split_size": 0.15}, seed=5).rows()
    assert (len(train), len(held_out)) == (len(split["train"]), len(split["test"])) == (43, 8)
    assert sorted(map(json.dumps, train + held_out)) == sorted(map(json.dumps, trl))


def recipe_rows(sources, seed, test_split_size):
    """open-r1's get_dataset, step by step from its definition (utils/data.py) on local files."""
    parts = []
    for path, columns, weight in sources:
        ds = loaded(path)
        if columns is not None:
            ds = ds.select_columns(columns)
        if weight is not None:
            ds = ds.shuffle(seed=seed).select(range(int(len(ds) * weight)))
        parts.append(ds)
    combined = datasets.concatenate_datasets(parts).shuffle(seed=seed)
    split = combined.train_test_split(test_size=test_split_size, seed=seed)
    return split["train"].to_list(), split["test"].to_list()


def test_the_recipe_s_weights_and_seed_give_its_rows(files):
    b = files / "folder" / "train.jsonl"
    for seed in (0, 42):
        mixture = {
            "datasets": [
                {"path": str(files / "a.jsonl"), "columns": ["prompt", "answer"], "weight": 0.5},
                {"path": str(b), "columns": ["prompt", "answer"], "weight": 1.0},
            ],  # fmt: skip
            "seed": seed,
            "test_split_size": 0.1,
        }
        want = recipe_rows([(files / "a.jsonl", ["prompt", "answer"], 0.5), (b, ["prompt", "answer"], 1.0)], seed, 0.1)
        assert PromptDataModule(mixture=mixture, seed=7).rows() == want  # data.seed plays no part
    assert (
        want[0]
        != recipe_rows([(files / "a.jsonl", ["prompt", "answer"], 0.5), (b, ["prompt", "answer"], 1.0)], 0, 0.1)[0]
    )  # noqa: E501


@pytest.mark.parametrize(
    ("mixture", "says"),
    [
        ({"datasets": [{"path": "json", "data_files": "A", "columns": ["prompt", "task"]}, {"path": "FOLDER", "columns": ["prompt", "task"]}]},  # noqa: E501
         "data.mixture.datasets[1] ('FOLDER') has no column 'task' of its columns ['prompt', 'task']; its columns: "
         "prompt, answer, level"),
        ({"datasets": [{"path": "json", "data_files": "A", "weight": 0.5}]}, "datasets[0].weight is the recipe's"),
        ({"datasets": [{"path": "A", "fraction": 0.5}, {"path": "FOLDER"}]}, "datasets[1].fraction: set fraction on"),
        ({"datasets": [{"path": "A"}], "streaming": True}, "streaming=True is not read"),
        ({"datasets": [{"path": "A"}], "test_split_size": 1.5}, "test_split_size=1.5 must be a share"),
        ({"datasets": [{"id": "org/x"}]}, "datasets[0].id is not a field of a source; valid: path, name"),
        ({"datasets": [{"path": "json", "data_files": "missing.jsonl"}]}, "data_files: 'missing.jsonl' does not exist"),
        ({"datasets": [{"path": "org-t60/nowhere"}]}, "datasets[0].path: 'org-t60/nowhere' is neither a local"),
    ],
)  # fmt: skip
def test_bad_mixtures_are_one_line_naming_the_source(files, mixture, says):
    text = json.dumps(mixture).replace('"A"', json.dumps(str(files / "a.jsonl")))
    text = text.replace('"FOLDER"', json.dumps(str(files / "folder")))
    with pytest.raises(ConfigError) as err:
        PromptDataModule(mixture=json.loads(text)).rows()
    line = str(err.value).replace(str(files / "a.jsonl"), "A").replace(str(files / "folder"), "FOLDER")
    assert says in line and "\n" not in line and line.startswith("data.mixture")


def test_a_mixture_is_the_one_source(files):
    mixture = {"datasets": [{"path": str(files / "a.jsonl")}], "test_split_size": 2}
    for other, says in (({"path": "tiny/x"}, "data.mixture and data.path"), ({"eval_fraction": 0.1}, "set one")):
        with pytest.raises(ConfigError, match=says):
            check_data_settings({"mixture": mixture, **other})
    assert isinstance(as_mixture(mixture), DatasetMixture)
    dm = PromptDataModule(mixture=mixture, eval_size=1)
    assert dm.hparams["mixture"]["datasets"][0]["path"] == str(files / "a.jsonl")  # plain dicts in checkpoints
    assert [len(part) for part in dm.rows()] == [34, 1]


def test_as_conversation_makes_the_recipe_s_prompts():
    dm = PromptDataModule(system_prompt="Think first.", as_conversation=True, train_size=3, eval_split=None)
    dm.setup("fit")
    item = dm.train_items[0]
    assert item["prompt"] == [
        {"role": "system", "content": "Think first."},
        {"role": "user", "content": item["meta"]["prompt"]},
    ]
    wrapped = PromptDataModule(system_prompt="Think first.", train_size=3, eval_split=None)
    wrapped.setup("fit")
    assert [i["prompt_ids"] for i in dm.train_items] == [i["prompt_ids"] for i in wrapped.train_items]
    assert isinstance(wrapped.train_items[0]["prompt"], str)
    with pytest.raises(ConfigError, match="data.as_conversation makes the prompts conversations"):
        PromptDataModule(as_conversation=True, chat_template=False)


def test_a_conversation_that_ends_with_the_assistant_is_refused(tmp_path):
    row = {"prompt": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
    (tmp_path / "train.jsonl").write_text(json.dumps(row) + "\n")
    dm = PromptDataModule(path=str(tmp_path / "train.jsonl"), batch_size=1)
    with pytest.raises(ConfigError, match=r"row 0 of split 'train' .* ends with an assistant message \('4'\)"):
        dm._encode(load_tokenizer("tiny"), [row], "train")


class Prompts(L.Callback):
    def __init__(self):
        self.seen = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.seen.append([b["meta"]["prompt"] for b in batch])


@pytest.mark.slow  # two short fits
def test_a_two_file_mixture_trains_two_steps_and_resumes_exactly(files, tmp_path):
    mixture = {"datasets": [{"path": "json", "data_files": str(files / "a.jsonl"), "columns": ["prompt", "answer"]},
                            {"path": str(files / "folder"), "columns": ["prompt", "answer"]}]}  # fmt: skip
    small = dict(group_size=2, sampler=SamplerConfig(num_slots=4, max_new_tokens=8), optimizer=OptimizerConfig(1e-3))

    def run(callbacks, ckpt=None):
        L.seed_everything(0)
        module, seen = GRPOModule(**small), Prompts()
        t = trainer(tmp_path, 2, callbacks=[seen, *callbacks])
        t.fit(module, PromptDataModule(mixture=mixture, batch_size=2, eval_split=None), ckpt_path=ckpt)
        return module, seen.seen

    every_step = ModelCheckpoint(tmp_path / "ckpt", every_n_train_steps=1, save_top_k=-1)
    straight, seen = run([every_step])
    resumed, rest = run([], ckpt=tmp_path / "ckpt" / "epoch=0-step=1.ckpt")
    assert rest == seen[1:] and len(seen) == 2
    for (k, a), b in zip(straight.policy.state_dict().items(), resumed.policy.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
