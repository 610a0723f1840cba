"""TRL configs of vision-language runs convert (``python -m infgrpo.from_trl``, :mod:`infgrpo.trl.vision`): the model,
the data and its image columns carry over, the model is recognised by its config or ``--vlm``, and the converted YAML
passes every check of ``python -m infgrpo.fit`` before loading, the processor rendering the image rows."""

import pytest
import yaml

pytest.importorskip("trl")

from infgrpo.fit import GRPOCLI  # noqa: E402
from infgrpo.fit import main as fit  # noqa: E402
from infgrpo.from_trl import convert, main  # noqa: E402
from tests.test_fit import LOCAL_VISION  # noqa: E402
from tests.trl.test_real_files import FIXTURES  # noqa: E402

EXAMPLE = FIXTURES / "trl_grpo_vlm.yaml"


def vision_notes(notes):
    return [n for n in notes if " is a vision-language model (" in n]


def test_trl_s_vlm_example_converts_and_passes_every_check_before_loading(tmp_path, capsys, monkeypatch):
    out = tmp_path / "infgrpo.yaml"
    assert main([str(EXAMPLE), "--vlm", "-o", str(out)]) == 0  # the hub id's config is not here: --vlm says it
    err = capsys.readouterr().err
    assert "note: model_name_or_path='Qwen/Qwen2.5-VL-3B-Instruct' is a vision-language model (--vlm)" in err
    assert "set the pixels with data.processor_kwargs, e.g. {min_pixels: 200704, max_pixels: 401408}" in err
    config = yaml.safe_load(out.read_text())
    model, data = config["model"], config["data"]
    assert model["policy"]["model_name_or_path"] == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert data["path"] == "lmms-lab/multimodal-open-r1-8k-verified"  # its image column is read as it is
    assert model["rewards"]["functions"] == {"trl.rewards:think_format_reward": 1.0, "trl.rewards:accuracy_reward": 1.0}
    assert model["lora"]["target_modules"] == ["q_proj", "v_proj"] and "train_vision_tower" not in model["policy"]
    assert model["sampler"]["max_new_tokens"] == 1024

    def loaded(self):
        raise SystemExit(0)  # every check passed; the model would load next

    monkeypatch.setattr(GRPOCLI, "instantiate_classes", loaded)
    with pytest.raises(SystemExit) as stop:  # the converted file, on tiny-vl and the shapes rows (TRL's format)
        fit(["--config", str(out), *LOCAL_VISION, "--model.sampler.max_new_tokens", "16", "--data.eval_split", "null"])
    assert stop.value.code == 0, capsys.readouterr().err


def test_a_vision_language_model_is_recognised_by_its_config():
    [note] = vision_notes(convert({"model_name_or_path": "tiny-vl"}).notes)
    assert "(its config (qwen2_5_vl, a vision_config))" in note
    assert vision_notes(convert({"model_name_or_path": "tiny"}).notes) == []
    assert vision_notes(convert({"model_name_or_path": "tiny"}, vlm=True).notes) != []  # the flag wins
    unread = convert({"model_name_or_path": "org/Not-Cached-VL-2B"}).notes  # unread: a text model, with a hint
    assert vision_notes(unread) == [] and any(
        "looks like a vision-language model" in n and "--vlm" in n for n in unread
    )
    for name in ("Qwen/Qwen3-0.6B", "HuggingFaceTB/SmolLM2-135M", "org/novel-model"):  # no hint for text names
        assert not any("looks like a vision-language" in n for n in convert({"model_name_or_path": name}).notes)
    for name in (
        "HuggingFaceTB/SmolVLM2-2.2B-Instruct",
        "HuggingFaceM4/Idefics3-8B-Llama3",
        "llava-hf/llava-1.5-7b-hf",
    ):
        assert any("looks like a vision-language" in n for n in convert({"model_name_or_path": name}).notes), name


def test_the_vision_tower_trains_where_trl_s_run_trains_it():
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    from infgrpo.assets import TINY_VL_MODEL_DIR

    model = AutoModelForImageTextToText.from_pretrained(TINY_VL_MODEL_DIR, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=2, target_modules="all-linear"))  # what TRL's all-linear trains
    assert any(".visual." in n and "lora_" in n for n, _ in peft.named_parameters())
    policy = {"model_name_or_path": "tiny-vl", "use_peft": True}
    tower = convert({**policy, "lora_target_modules": "all-linear"}).config["model"]["policy"]
    assert tower["train_vision_tower"] is True
    assert convert({"model_name_or_path": "tiny-vl"}).config["model"]["policy"]["train_vision_tower"] is True  # full
    names = convert({**policy, "lora_target_modules": ["q_proj", "v_proj"]}).config["model"]["policy"]
    assert "train_vision_tower" not in names


def test_max_prompt_length_with_images_is_carried_over_and_never_cuts():
    result = convert({"model_name_or_path": "tiny-vl", "max_prompt_length": 512})
    assert result.config["data"]["max_prompt_length"] == 512
    assert any(n.startswith("max_prompt_length=512 with images: TRL 1.16 has no such field") for n in result.notes)
    unset = convert({"model_name_or_path": "tiny-vl"}).notes
    assert any(n.startswith("data.max_prompt_length=128 counts the image tokens too") for n in unset)
    cb = convert({"model_name_or_path": "tiny-vl", "use_transformers_continuous_batching": True}).notes
    assert any("TRL 1.16 refuses it for a vision-language model" in n for n in cb)
