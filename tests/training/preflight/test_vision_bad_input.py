"""A vision-language run's bad input through ``python -m infgrpo.fit`` (``configs/vlm-tiny.yaml``): one ``error:``
line before the model loads, naming the setting and what is valid (#62 item 8). The rules themselves are tested on
``check_first_rows`` and the data module in tests/data/test_images.py; here each is the command line's one line."""

import json
import shutil

import pytest

from infgrpo.assets import TINY_VL_MODEL_DIR
from infgrpo.assets.shapes import make_split
from tests.test_fit import ROOT, cli_error

VLM = ["--config", str(ROOT / "configs" / "vlm-tiny.yaml")]


@pytest.fixture
def rows_folder(tmp_path):
    """Writes ``train.jsonl`` of two shapes rows (TRL's format) with ``image`` set by ``image(i, png)``; the flags that
    read it (no held-out split, a batch of the two rows)."""

    def write(image=lambda i, png: png):
        for i, row in enumerate(make_split(2, "train", 0)):
            row["image"].save(tmp_path / f"{i}.png")
            line = {"prompt": row["prompt"], "image": image(i, f"{i}.png"), "answer": row["answer"]}
            with (tmp_path / "train.jsonl").open("a") as f:
                f.write(json.dumps(line) + "\n")
        return ["--data.path", str(tmp_path), "--data.eval_split", "null", "--data.train_size", "null",
                "--data.batch_size", "2"]  # fmt: skip

    return write


def test_a_baseline_decoder_is_one_line_before_the_model_loads(capsys):
    line = cli_error(capsys, *VLM, "--model.sampler.decoder", "hf_full")
    assert "model.sampler.decoder='hf_full' decodes token ids only, and 'qwen2_5_vl' is a vision-language model" in line
    assert line.endswith("use model.sampler.decoder: engine")


def test_images_with_a_text_only_model_name_the_model(capsys):
    line = cli_error(capsys, *VLM, "--model.policy.model_name_or_path", "tiny")
    assert (
        "column 'image'), but data.tokenizer='tiny' (the model) is a text-only model, with no image processor" in line
    )


def test_a_missing_image_file_names_the_row_and_where_it_looked(capsys, rows_folder):
    line = cli_error(capsys, *VLM, *rows_folder(image=lambda i, png: f"gone-{png}"))
    assert "row 0 of split 'train', column 'image': image file 'gone-0.png' does not exist" in line


def test_an_images_column_of_the_wrong_type_says_it_holds_a_list(capsys, rows_folder, tmp_path):
    flags = rows_folder()
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    with (tmp_path / "train.jsonl").open("w") as f:  # 'images' with one path a row, not a list
        f.writelines(json.dumps({**{k: v for k, v in r.items() if k != "image"}, "images": r["image"]}) + "\n"
                     for r in rows)  # fmt: skip
    line = cli_error(capsys, *VLM, *flags)
    assert "row 0 of split 'train', column 'images' holds a str; 'images' holds a list of images a row" in line


def test_a_template_that_cannot_place_an_image_names_the_template(capsys, tmp_path):
    folder = tmp_path / "plain-vl"
    shutil.copytree(TINY_VL_MODEL_DIR, folder)
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    )
    line = cli_error(capsys, *VLM, "--model.policy.model_name_or_path", str(folder))
    assert "does not place an image: for one {'type': 'image'} block it wrote 0 '<|image_pad|>' tokens" in line


def test_pixels_that_overflow_the_context_name_the_pixel_setting(capsys):
    big = "{min_pixels: 100352, max_pixels: 100352}"  # ~512 image tokens of 14 x 14 pixels: past the 512 positions
    few = ["--data.train_size", "8", "--data.eval_size", "2"]  # the first rows rendered: 10, not 64 + 64
    line = cli_error(capsys, *VLM, *few, "--data.processor_kwargs", big, "--data.max_prompt_length", "4096")
    assert "has 562 tokens, 529 of them for its images (lower their pixels with data.processor_kwargs" in line
    assert "but the model's context (max_position_embeddings) is 512" in line


def test_tools_whose_template_places_no_image_are_one_line(capsys):
    tools = ["--model.agent.tools", "[infgrpo.assets.calculator:add]"]
    line = cli_error(capsys, *VLM, *tools)  # tiny-vl's template renders no tool calls (as Qwen2.5-VL's)
    assert line.startswith("error: model.agent.chat_template=None: the tokenizer's own chat template drops the tool")
    line = cli_error(capsys, *VLM, *tools, "--model.agent.chat_template", "compact")  # tools, but no image block
    assert line.startswith("error: model.agent.chat_template (the agent's) ")
    assert "image" in line and line.endswith("; give one that renders tool calls and image blocks, or leave it unset")
