"""TRL's image columns: the rows' images, TRL's prompt rewrite and rendering, vision items, the refusals."""

import io
import json
from types import SimpleNamespace

import datasets
import numpy as np
import pytest
import torch
from trl.data_utils import prepare_multimodal_messages
from trl.trainer.grpo_trainer import GRPOTrainer

from infgrpo.assets.shapes import draw, make_split, sample_scene
from infgrpo.assets.tiny_vlm import tiny_vlm_config, vlm_tokenizer, write_processor_files
from infgrpo.data import PromptDataModule
from infgrpo.data.images import inject_images, row_images
from infgrpo.settings import ConfigError
from infgrpo.vision.inputs import collate
from infgrpo.vision.processor import load_processor

CONVERSATIONS = [
    [{"role": "user", "content": "What is shown?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "colours?"}],
    [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "second"},
    ],
]


@pytest.fixture(scope="module", params=["qwen2_5_vl", "idefics3"])
def vlm_folder(request, tmp_path_factory):
    """A tiny VLM's config and stock processor files (no weights: the data side reads only these)."""
    folder = tmp_path_factory.mktemp(request.param)
    tok = vlm_tokenizer(request.param)
    tiny_vlm_config(request.param, tok).save_pretrained(folder)
    write_processor_files(request.param, tok, folder)
    return str(folder)


def pictures(n, seed=0):
    import random

    rng = random.Random(seed)
    return [draw(sample_scene(rng)) for _ in range(n)]


@pytest.mark.parametrize("n", [0, 1, 2])
def test_images_are_injected_as_trls_prepare_multimodal_messages(n):
    for conversation in CONVERSATIONS:
        images = pictures(n)
        assert inject_images(conversation, images) == prepare_multimodal_messages(conversation, images=images)
        assert conversation[0]["content"] in ("What is shown?", "Be brief.", "first")  # the input untouched


def test_a_conversation_with_its_own_placeholders_is_filled_in_order_or_refused():
    blocks = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "a"}, {"type": "image"}]}]
    images = pictures(2)
    assert inject_images(blocks, images) == prepare_multimodal_messages(blocks, images=images)
    with pytest.raises(ConfigError, match="2 image placeholders without an image, and its row 1 images"):
        inject_images(blocks, images[:1])


def test_row_images_read_pil_bytes_and_paths_and_images_wins(tmp_path):
    a, b = pictures(2)
    a.save(tmp_path / "a.png")
    buffer = io.BytesIO()
    b.save(buffer, format="PNG")
    got = row_images(
        {"images": ["a.png", {"bytes": buffer.getvalue(), "path": None}], "image": b}, "train", 0, tmp_path
    )
    assert [im.tobytes() for im in got] == [a.tobytes(), b.tobytes()]
    assert row_images({"image": b}, "train", 0)[0] is b
    assert row_images({"image": None}, "train", 0) is None and row_images({"images": []}, "train", 0) is None
    assert row_images({"prompt": "x"}, "train", 0) is None


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"images": "a.png"}, "row 3 of split 'train', column 'images' holds a str; 'images' holds a list of images"),
        ({"image": ["a.png"]}, "column 'image' holds a list; 'image' holds one image a row: rename the column"),
        ({"image": 7}, r"column 'image' holds a int; an image is a PIL image, a datasets.Image value"),
        ({"images": [7]}, r"column 'images' \(image 0\) holds a int"),
        ({"image": "missing.png"}, r"image file 'missing.png' does not exist \(looked at .*missing.png"),
    ],
)
def test_bad_image_values_are_one_line_naming_the_row_and_column(tmp_path, row, message):
    with pytest.raises(ConfigError, match=message):
        row_images(row, "train", 3, tmp_path)


def trl_tokenize(processor, prompts):
    """TRL 1.16's own rendering of a batch of image prompts (GRPOTrainer._tokenize_prompts on a minimal trainer)."""
    trainer = SimpleNamespace(
        _is_vlm=True, environment_factories=None, processing_class=processor, tools=None, chat_template=None,
        chat_template_kwargs={},
    )  # fmt: skip
    return GRPOTrainer._tokenize_prompts(trainer, prompts)


def shapes_rows(n, seed=0):
    return [{k: r[k] for k in ("prompt", "image", "answer")} for r in make_split(n, "train", seed)]


def test_the_data_module_renders_image_prompts_as_trl_and_collates_their_pixels_once(vlm_folder):
    rows = shapes_rows(5)
    rows[2] = {**rows[2], "image": None}  # a text-only row among image rows
    dm = PromptDataModule(train_dataset=datasets.Dataset.from_list(rows).cast_column("image", datasets.Image()),
                          tokenizer=vlm_folder, eval_split=None, batch_size=5)  # fmt: skip
    dm.setup("fit")
    items = dm.train_items
    processor = load_processor(vlm_folder)
    images = [[r["image"]] if r["image"] is not None else None for r in rows]
    trl_prompts = [prepare_multimodal_messages(r["prompt"], images=im) for r, im in zip(rows, images, strict=True)]
    ids, _, fields = trl_tokenize(processor, trl_prompts)
    assert [it["prompt_ids"] for it in items] == [list(i) for i in ids]
    assert [it.get("image_tokens", 0) for it in items] == [16, 16, 0, 16, 16]
    assert items[0]["prompt"][0]["content"][0]["type"] == "image"  # rewards get TRL's rewritten prompts
    batch = dm.collate(items)
    assert "vision" not in items[0] and "vision" not in batch[2]  # the held items stay light; a text row has none
    got = collate([it.get("vision") for it in batch], processor.family)
    assert set(got) == set(processor.family.image_tensors)
    for key, value in got.items():  # Idefics3: the text row is an all-zero image in both
        torch.testing.assert_close(value, torch.as_tensor(np.asarray(fields[key])), rtol=0, atol=0)


def test_images_with_a_text_only_model_are_refused_at_setup():
    rows = datasets.Dataset.from_list(shapes_rows(2))
    dm = PromptDataModule(train_dataset=rows, tokenizer="tiny", eval_split=None)
    with pytest.raises(ConfigError, match="hold images .column 'image'., but data.tokenizer='tiny' .* is a text-only"):
        dm.setup("fit")


def test_a_string_prompt_with_an_image_is_refused_as_trl_does(vlm_folder):
    rows = [{"prompt": "What is shown?", "image": pictures(1)[0]}]
    dm = PromptDataModule(train_dataset=rows, tokenizer=vlm_folder, eval_split=None)
    with pytest.raises(ConfigError, match="row 0 of split 'train' has images but a string prompt"):
        dm.setup("fit")


def test_a_template_that_cannot_place_an_image_is_refused(vlm_folder, tmp_path):
    import shutil

    folder = tmp_path / "plain"
    shutil.copytree(vlm_folder, folder)
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    )
    dm = PromptDataModule(train_dataset=shapes_rows(1), tokenizer=str(folder), eval_split=None)
    with pytest.raises(ConfigError, match="does not place an image: for one {'type': 'image'} block it wrote 0"):
        dm.setup("fit")


def test_image_tokens_past_the_prompt_limit_name_the_pixel_setting(vlm_folder):
    dm = PromptDataModule(train_dataset=shapes_rows(2), tokenizer=vlm_folder, eval_split=None, max_prompt_length=30)
    with pytest.raises(ValueError, match="16 of them for its images.*data.processor_kwargs"):
        dm.setup("fit")


def test_unknown_processor_settings_are_refused(vlm_folder):
    dm = PromptDataModule(train_dataset=shapes_rows(1), tokenizer=vlm_folder, eval_split=None,
                          processor_kwargs={"max_pixel": 10})  # fmt: skip
    with pytest.raises(ConfigError, match="data.processor_kwargs has 'max_pixel', which .* does not take"):
        dm.setup("fit")


def test_local_files_with_relative_image_paths(vlm_folder, tmp_path):
    rows = shapes_rows(3)
    write_image_rows(tmp_path, rows)
    dm = PromptDataModule(path=str(tmp_path), tokenizer=vlm_folder, eval_split=None, batch_size=3)
    dm.setup("fit")
    assert [it["images"][0].tobytes() for it in dm.train_items] == [r["image"].tobytes() for r in rows]


def write_image_rows(folder, rows, image=lambda i: f"{i}.png"):
    with (folder / "train.jsonl").open("w") as f:
        for i, r in enumerate(rows):
            r["image"].save(folder / f"{i}.png")
            f.write(json.dumps({"prompt": r["prompt"], "image": image(i), "answer": r["answer"]}) + "\n")


def test_the_first_rows_check_measures_image_tokens_and_refuses_before_loading(vlm_folder, tmp_path):
    from infgrpo.data.first_rows import check_first_rows
    from infgrpo.policy.load import load_tokenizer

    write_image_rows(tmp_path, shapes_rows(3))
    hp = dict(PromptDataModule(path=str(tmp_path), tokenizer=vlm_folder, eval_split=None).hparams)
    kept = check_first_rows(hp, lambda: load_tokenizer(vlm_folder))
    dm = PromptDataModule(path=str(tmp_path), tokenizer=vlm_folder, eval_split=None)
    dm.setup("fit")
    assert [n for _, _, n in kept] == [len(it["prompt_ids"]) for it in dm.train_items]  # the data module's lengths
    with pytest.raises(ConfigError, match="tokens, 16 of them for its images.*data.processor_kwargs"):
        check_first_rows({**hp, "max_prompt_length": 30}, lambda: load_tokenizer(vlm_folder))
    with pytest.raises(ConfigError, match="is a text-only model"):
        check_first_rows({**hp, "tokenizer": "tiny"}, lambda: load_tokenizer("tiny"))
    write_image_rows(tmp_path, shapes_rows(2), image=lambda i: f"gone-{i}.png")
    with pytest.raises(ConfigError, match="row 0 of split 'train', column 'image': image file 'gone-0.png' does not"):
        check_first_rows(hp, lambda: load_tokenizer(vlm_folder))
