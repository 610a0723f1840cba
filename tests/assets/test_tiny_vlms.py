"""The shipped tiny vision-language models and the shapes task: TRL's data format, the reward, models that see."""

import datasets
import pytest
import torch
from PIL import Image

from infgrpo.assets import SHAPES_DATA_DIR, TINY_IDEFICS3_MODEL_DIR, TINY_VL_MODEL_DIR
from infgrpo.assets.shapes import KINDS, make_split
from infgrpo.assets.shapes import correct as shapes_reward
from infgrpo.assets.tiny_vlm import tiny_vlm_config, vlm_tokenizer
from infgrpo.data import PromptDataModule
from infgrpo.data.images import inject_images
from infgrpo.policy.load import load_policy
from infgrpo.vision.families import banned_token_ids
from infgrpo.vision.parts import trainable_vision
from infgrpo.vision.processor import load_processor

ALIASES = {"tiny-vl": ("qwen2_5_vl", TINY_VL_MODEL_DIR), "tiny-idefics3": ("idefics3", TINY_IDEFICS3_MODEL_DIR)}


def test_the_shapes_splits_are_trl_rows_with_images_and_verifiable_answers():
    held = datasets.load_dataset("parquet", data_files=str(SHAPES_DATA_DIR / "eval.parquet"), split="train")
    assert len(held) == 500 and set(held.column_names) == {"prompt", "image", "answer", "kind"}
    row = held[0]
    assert isinstance(row["image"], Image.Image) and row["image"].size == (56, 56)
    assert row["prompt"][0]["role"] == "user" and isinstance(row["prompt"][0]["content"], str)
    assert set(held["kind"]) == set(KINDS)
    again = make_split(500, "eval", seed=1)  # the build's seed: the shipped rows are the recipe's
    assert [r["answer"] for r in again] == held["answer"]
    assert again[3]["image"].tobytes() == held[3]["image"].tobytes()
    train_keys = {r["image"].tobytes() for r in make_split(300, "train", seed=0)}
    assert not train_keys & {r["image"].tobytes() for r in again}  # no held-out image is trained on


def test_the_reward_takes_trls_conversational_completions():
    rows = make_split(4, "train", seed=0)
    right = [[{"role": "assistant", "content": f" {r['answer']}\n"}] for r in rows]
    wrong = [[{"role": "assistant", "content": r["flawed"]}] for r in rows]
    answers = [r["answer"] for r in rows]
    assert shapes_reward(right, answers) == [1.0] * 4 and shapes_reward(wrong, answers) == [0.0] * 4
    assert shapes_reward([r["answer"] for r in rows], answers) == [1.0] * 4  # string completions too


@pytest.fixture(scope="module", params=list(ALIASES))
def shipped(request):
    return request.param, load_policy(request.param).eval(), load_processor(request.param)


def test_the_shipped_models_are_the_recipe_and_load_with_their_processor(shipped):
    alias, model, processor = shipped
    family, folder = ALIASES[alias]
    recipe = tiny_vlm_config(family, vlm_tokenizer(family))
    for key in ("model_type", "image_token_id"):
        assert getattr(model.config, key) == getattr(recipe, key)
    assert model.config.get_text_config().hidden_size == recipe.get_text_config().hidden_size
    assert processor.tokenizer.get_vocab() == vlm_tokenizer(family).get_vocab()
    assert trainable_vision(model) == []  # loaded as a policy: the vision side frozen
    assert sum(p.numel() for p in model.parameters()) < 1_000_000 and folder.is_dir()


def test_the_shipped_models_see_the_image_and_answer_right_and_flawed(shipped):
    alias, model, processor = shipped
    rows = make_split(40, "eval", seed=1)
    conversations = [inject_images(r["prompt"], [r["image"]]) for r in rows]
    batch = processor.apply_chat_template(
        conversations, add_generation_prompt=True, tokenize=True, return_dict=True, padding=True, return_tensors="pt"
    )
    torch.manual_seed(0)
    with torch.no_grad():
        first = torch.log_softmax(model(**batch).logits[:, -1], dim=-1)  # (40, V) the answer's first token
        out = model.generate(
            **batch, max_new_tokens=32, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
            suppress_tokens=banned_token_ids(model.config), pad_token_id=processor.tokenizer.pad_token_id,
        )  # fmt: skip
    assert (first - first[0]).abs().max() > 1.0  # the answer depends on the image
    texts = processor.tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    right = sum(t.strip() == r["answer"] for t, r in zip(texts, rows, strict=True))
    flawed = sum(t.strip() == r["flawed"] for t, r in zip(texts, rows, strict=True))
    assert right >= 4 and flawed >= 4, (alias, right, flawed)  # both: GRPO has something to prefer


def test_the_data_module_reads_the_shipped_task_with_a_shipped_model():
    dm = PromptDataModule(path=str(SHAPES_DATA_DIR), tokenizer="tiny-vl", eval_size=8, batch_size=4, train_size=8)
    dm.setup("fit")
    assert len(dm.train_items) == 8 and len(dm.eval_items) == 8
    assert all(it["image_tokens"] == 16 for it in dm.train_items + dm.eval_items)
    batch = next(iter(dm.train_dataloader()))
    assert all(it["vision"].num_images == 1 for it in batch)
