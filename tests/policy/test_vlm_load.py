"""A vision-language policy: loaded by its Auto class, LoRA on the language model, the vision side frozen by default."""

import pytest
import torch
from transformers import AutoModelForImageTextToText

from infgrpo.assets.tiny_vlm import tiny_vlm_config, vlm_tokenizer, write_processor_files
from infgrpo.policy.config import LoRAConfig
from infgrpo.policy.load import load_policy
from infgrpo.policy.lora_targets import check_lora_targets
from infgrpo.settings import ConfigError
from infgrpo.vision.parts import language_model_name, trainable_vision


@pytest.fixture(scope="module", params=["qwen2_5_vl", "idefics3", "gemma3"])
def vlm_folder(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    tok = vlm_tokenizer(request.param)
    torch.manual_seed(0)
    AutoModelForImageTextToText.from_config(tiny_vlm_config(request.param, tok)).save_pretrained(folder)
    write_processor_files(request.param, tok, folder)
    return str(folder)


def adapters(model):
    return [n for n, _ in model.named_modules() if n.endswith("lora_A")]


def test_lora_goes_on_the_language_model_only_and_the_vision_side_is_frozen(vlm_folder):
    model = load_policy(vlm_folder, lora_r=4)
    language = language_model_name(model)
    assert adapters(model) and all(n.startswith(language + ".") for n in adapters(model))
    assert trainable_vision(model) == []
    assert all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)


def test_train_vision_tower_puts_adapters_where_pefts_all_linear_does(vlm_folder):
    from peft import LoraConfig, get_peft_model

    ours = load_policy(vlm_folder, lora_r=4, train_vision_tower=True)
    pefts = get_peft_model(
        AutoModelForImageTextToText.from_pretrained(vlm_folder), LoraConfig(r=4, target_modules="all-linear")
    )
    assert adapters(ours) == adapters(pefts)
    assert trainable_vision(ours)  # the vision side's adapters train


def test_full_fine_tuning_freezes_only_the_vision_side(vlm_folder):
    model = load_policy(vlm_folder)
    language = language_model_name(model)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and trainable_vision(model) == []
    assert any(n.startswith(language) for n in trainable)
    assert all(p.requires_grad for n, p in model.named_parameters() if n.startswith(language))


def test_4bit_lora_loads_a_vlm_and_runs_a_forward(vlm_folder):
    model = load_policy(vlm_folder, lora_r=4, load_in_4bit=True, bnb_4bit_compute_dtype="float32")
    ids = torch.tensor([[5, 6, 7]])
    assert torch.isfinite(model(input_ids=ids).logits).all()
    assert trainable_vision(model) == []


def test_lora_targets_of_a_vlm_are_checked_on_its_own_class(vlm_folder):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(vlm_folder)
    check_lora_targets(config, LoRAConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with pytest.raises(ConfigError, match="names no module of the model .*ForConditionalGeneration"):
        check_lora_targets(config, LoRAConfig(r=4, target_modules=["qkv_projection"]))


@pytest.mark.parametrize("targets", [["q_proj", "gate_proj", "up_proj"], r".*\.(q_proj|gate_proj|up_proj)"])
def test_named_lora_targets_stay_on_the_language_model_while_the_tower_is_frozen(vlm_folder, targets):
    from peft import LoraConfig, get_peft_model

    ours = load_policy(vlm_folder, lora_r=4, lora_target_modules=targets)
    pefts = get_peft_model(
        AutoModelForImageTextToText.from_pretrained(vlm_folder), LoraConfig(r=4, target_modules=targets)
    )
    language = language_model_name(ours) + "."
    assert trainable_vision(ours) == []  # peft alone puts the names' adapters on the vision side too (Qwen-VL's mlp)
    assert adapters(ours) == [n for n in adapters(pefts) if n.startswith(language)]
