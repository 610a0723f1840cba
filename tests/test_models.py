"""The real loading path: save_pretrained -> our loader (4-bit + LoRA) -> rollout + step -> peft adapter."""

import lightning as L
import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.data import PromptDataModule
from infgrpo.models import export_merged, keep_4bit_trainable, load_policy, save_trained
from infgrpo.sampler import MicroGroupSampler
from infgrpo.update import collate, completion_logprobs
from tests.helpers import dequantized_reference, save_base, trained_4bit_lora


def length_reward(completions, metadata):
    return [len(c) / 10 for c in completions]


def logprobs_of(model, prompts, completions):
    mb = collate(list(range(len(prompts))), prompts, completions, pad_id=0)
    with torch.no_grad():
        return completion_logprobs(model, mb)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_4bit_lora_rollout_step_and_adapter_roundtrip(arch, tokenizer, tmp_path):
    base = save_base(arch, tokenizer, tmp_path / "base")
    module = GRPOModule(
        policy={"model_name_or_path": base},
        lora={"r": 4},
        quantization={"load_in_4bit": True, "bnb_4bit_compute_dtype": "float32"},
        group_size=4,
        sampler=SamplerConfig(num_slots=4, max_new_tokens=12),
        rewards={"functions": {f"{__name__}:length_reward": 1.0}, "accuracy": None},
        optimizer={"learning_rate": 5e-2},
        objective={"beta": 0.04},
    )
    assert module.ref_model is None  # the reference is the base model with adapters disabled
    lora_before = {k: v.clone() for k, v in module.policy.named_parameters() if "lora_B" in k}
    L.Trainer(
        max_steps=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        limit_val_batches=0,
        enable_model_summary=False,
    ).fit(module, PromptDataModule(path="tiny", tokenizer=base, batch_size=2, eval_split=None))
    changed = [k for k, v in module.policy.named_parameters() if "lora_B" in k and not torch.equal(v, lora_before[k])]
    assert changed
    adapter = save_trained(module.policy, module.tokenizer, tmp_path / "adapter")
    assert (adapter / "adapter_config.json").exists() and (adapter / "adapter_model.safetensors").exists()

    q = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.float32,
    )
    reloaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, quantization_config=q), adapter)
    prompts, comps = [[1, 5, 7, 90, 77], [1, 5, 7]], [[73, 74, 2], [80, 81, 82, 83]]
    module.policy.eval()
    keep_4bit_trainable(reloaded)  # else bitsandbytes repacks its weights: same values, other kernel
    got, want = logprobs_of(module.policy, prompts, comps), logprobs_of(reloaded.eval(), prompts, comps)
    assert torch.allclose(got, want, atol=1e-6)  # same quantized base, same adapter: the same model


def lora_grads(model, ids):
    model.train()
    model.zero_grad()
    model(ids, labels=ids).loss.backward()
    return {k: p.grad.double().clone() for k, p in model.named_parameters() if p.requires_grad}


def test_4bit_lora_gradients_match_a_dequantized_float64_reference_before_and_after_a_rollout(tokenizer, tmp_path):
    # bitsandbytes repacks 4-bit weights for an inference-only CPU kernel on the first eval forward
    # (on AVX512-BF16 CPUs); load_policy must keep the gradients through them right after rollouts.
    policy, base = trained_4bit_lora("qwen3", tokenizer, tmp_path / "base")
    ref = dequantized_reference(policy, base, lora_r=4)
    ids = torch.tensor([[1, 5, 7, 90, 77, 73, 74, 80]])
    expected = lora_grads(ref, ids)
    before = lora_grads(policy, ids)
    MicroGroupSampler(policy, tokenizer, SamplerConfig(num_slots=2, max_new_tokens=6)).sample([[1, 5, 7]], 4)
    after = lora_grads(policy, ids)
    assert len(expected) == len(before) == len(after) == 28
    for name, g in expected.items():
        assert g.norm() > 0, name
        for got in (before, after):
            assert torch.allclose(got[name], g, rtol=1e-4, atol=1e-6 * g.abs().max().item()), name


def test_merged_export_loads_as_a_plain_model_with_the_same_logprobs(tokenizer, tmp_path):
    base = save_base("qwen3", tokenizer, tmp_path / "base")
    model = load_policy(base, lora_r=4)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)  # a trained-looking adapter
    out = export_merged(model, tokenizer, base, tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(out)
    assert not any("lora" in k for k in merged.state_dict())
    prompts, comps = [[1, 5, 7, 90, 77]], [[73, 74, 2]]
    assert torch.allclose(
        logprobs_of(model.eval(), prompts, comps), logprobs_of(merged.eval(), prompts, comps), atol=1e-5
    )


def test_loading_options_are_validated_before_loading():
    with pytest.raises(ValueError, match="load_in_4bit=True needs LoRA"):
        GRPOModule(quantization={"load_in_4bit": True})
    with pytest.raises(ValueError, match="bnb_4bit_quant_type='int4' is not known; valid: nf4, fp4"):
        GRPOModule(lora={"r": 4}, quantization={"load_in_4bit": True, "bnb_4bit_quant_type": "int4"})
    with pytest.raises(ValueError, match="lora.r=-1 must be >= 0"):
        GRPOModule(lora={"r": -1})
