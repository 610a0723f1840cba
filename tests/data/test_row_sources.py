"""Rows are cut to ``train_size`` / ``eval_size`` before they are read, so only the kept rows' images are decoded."""

import datasets
import pytest
from PIL import Image

from infgrpo.data import PromptDataModule
from infgrpo.data.in_memory import held_out_split
from infgrpo.data.row_sources import load_rows


@pytest.fixture
def image_folder(tmp_path):
    """train.parquet (12 rows) and eval.parquet (6 rows), each row a distinct 4x4 image, as the shipped task holds
    them (a ``datasets.Image`` column)."""
    for split, n in (("train", 12), ("eval", 6)):
        images = [Image.new("RGB", (4, 4), (i * 20, 255 - i * 20, 7)) for i in range(n)]
        prompts = [[{"role": "user", "content": f"{split} {i}"}] for i in range(n)]
        ds = datasets.Dataset.from_dict({"prompt": prompts, "image": images}).cast_column("image", datasets.Image())
        ds.to_parquet(str(tmp_path / f"{split}.parquet"))
    return tmp_path


@pytest.fixture
def decoded(monkeypatch):
    """Counts the images ``datasets`` decodes (the real decoder runs)."""
    count = [0]
    decode = datasets.Image.decode_example

    def counted(self, value, token_per_repo_id=None):
        count[0] += 1
        return decode(self, value, token_per_repo_id=token_per_repo_id)

    monkeypatch.setattr(datasets.Image, "decode_example", counted)
    return count


def same(a: list[dict], b: list[dict]) -> bool:
    return [(r["prompt"], r["image"].tobytes()) for r in a] == [(r["prompt"], r["image"].tobytes()) for r in b]


def test_the_first_rows_are_the_full_reads_first_rows_and_only_they_are_decoded(image_folder, decoded):
    every = load_rows(str(image_folder), "train")
    assert len(every) == 12 and decoded[0] == 12
    decoded[0] = 0
    head = load_rows(str(image_folder), "train", limit=5)
    assert same(head, every[:5]) and decoded[0] == 5
    held = load_rows(str(image_folder / "eval.parquet"), "unused", limit=0)
    assert held == [] and decoded[0] == 5  # eval_size 0: nothing decoded, and no "no rows" error


def test_the_data_module_decodes_train_size_and_eval_size_rows_and_keeps_them(image_folder, decoded):
    every = load_rows(str(image_folder), "train"), load_rows(str(image_folder), "eval")
    decoded[0] = 0
    train, held_out = PromptDataModule(path=str(image_folder), train_size=4, eval_size=3).rows()
    assert same(train, every[0][:4]) and same(held_out, every[1][:3]) and decoded[0] == 4 + 3
    # a held-out share is drawn from every training row, so those are all read, and the cut comes after the draw
    data = PromptDataModule(path=str(image_folder / "train.parquet"), train_size=4, eval_fraction=0.25, seed=3)
    train, held_out = data.rows()
    want_train, want_held = held_out_split(every[0], 0.25, 3)
    assert same(train, want_train[:4]) and same(held_out, want_held)
