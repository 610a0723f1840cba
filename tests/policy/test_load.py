"""The real loading path: save_pretrained -> our loader (4-bit + LoRA) -> rollout + step -> peft adapter."""

from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from peft import PeftModel
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.data import PromptDataModule
from infgrpo.policy.load import export_merged, keep_4bit_trainable, load_policy, save_trained
from infgrpo.sampler import MicroGroupSampler
from infgrpo.sampler.engine.slot_pool import pool_width
from infgrpo.sampler.model_support import kv_bytes_per_token, kv_dtype, kv_shape
from infgrpo.sampler.pool_sizing import plan_pool, pool_shape
from infgrpo.update import collate, completion_logprobs
from tests.helpers import (
    ALLOW_02_REWARDS,
    ALLOW_SKIP_OFF,
    dequantized_reference,
    random_model,
    save_base,
    trained_4bit_lora,
)


def length_reward(completions, metadata):
    return [len(c) / 10 for c in completions]


def logprobs_of(model, prompts, completions):
    mb = collate(list(range(len(prompts))), prompts, completions, pad_id=0)
    with torch.no_grad():
        return completion_logprobs(model, mb)


@ALLOW_SKIP_OFF
@ALLOW_02_REWARDS
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


@pytest.mark.parametrize("upcast", [False, True])
def test_4bit_keeps_the_unquantized_weights_and_the_pool_in_the_compute_dtype_unless_upcast(
    upcast, tokenizer, tmp_path
):
    base = save_base("qwen3", tokenizer, tmp_path / "base")
    policy = load_policy(base, lora_r=4, load_in_4bit=True, bnb_4bit_compute_dtype="bfloat16", upcast_to_float32=upcast)
    want = torch.float32 if upcast else torch.bfloat16
    params = dict(policy.named_parameters())
    frozen = {n: p.dtype for n, p in params.items() if "lora_" not in n and p.is_floating_point()}
    assert "base_model.model.model.embed_tokens.weight" in frozen and set(frozen.values()) == {want}
    assert {p.dtype for n, p in params.items() if "lora_" in n} == {torch.float32}  # peft's float32 adapters
    assert {n for n, p in params.items() if p.requires_grad} == {n for n in params if "lora_" in n}
    layers, kv_heads, head_dim = kv_shape(policy.config)
    assert kv_dtype(policy) == want and kv_bytes_per_token(policy) == 2 * layers * kv_heads * head_dim * want.itemsize
    sampler = MicroGroupSampler(policy, tokenizer, SamplerConfig(num_slots=2, max_new_tokens=6, keep_pool=True))
    out = sampler.sample([[1, 5, 7]], 3, seed=0)
    assert sampler.pools.pool.kv.dtype == want and all(1 <= n <= 6 for n in out.lengths)


def test_4bit_lora_gradients_in_bfloat16_stay_close_to_the_dequantized_float64_reference(tokenizer, tmp_path):
    # the default 4-bit path computes in bfloat16 end to end; its LoRA gradients differ from the exact
    # float64 ones by bfloat16 rounding only (the float32 path is exact: the test above)
    policy, base = trained_4bit_lora("qwen3", tokenizer, tmp_path / "base", bnb_4bit_compute_dtype="bfloat16")
    ref = dequantized_reference(policy, base, lora_r=4)
    ids = torch.tensor([[1, 5, 7, 90, 77, 73, 74, 80]])
    expected, got = lora_grads(ref, ids), lora_grads(policy, ids)
    assert len(expected) == len(got) == 28
    errors = {name: ((got[name] - g).norm() / g.norm()).item() for name, g in expected.items()}
    cosines = {
        name: torch.nn.functional.cosine_similarity(got[name].flatten(), g.flatten(), 0).item()
        for name, g in expected.items()
    }
    # bfloat16 keeps 8 bits of mantissa (~0.4% a rounding), compounded over the layers' activations: a few
    # percent (seen: at most 6%); a wrong gradient (a missing scale, a detached path) is off by 100%
    assert max(errors.values()) < 0.12 and min(cosines.values()) > 0.99, (errors, cosines)


def test_the_qwen3_recipes_pool_holds_bfloat16_kv_as_its_comments_say(tokenizer, tmp_path):
    # Qwen3-1.7B's attention shape (28 layers, 8 K/V heads of 128) on a small random model: the K/V bytes
    # per position do not depend on the hidden or vocabulary sizes
    recipe = yaml.safe_load(Path("configs/qwen3.yaml").read_text())["model"]
    shape = dict(num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128)
    folder = tmp_path / "qwen3-1.7b-shape"
    random_model("qwen3", vocab=len(tokenizer), hidden_size=64, intermediate_size=64, **shape).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    q = recipe["quantization"]
    policy = load_policy(str(folder), lora_r=4, load_in_4bit=True, bnb_4bit_compute_dtype=q["bnb_4bit_compute_dtype"])
    assert pool_shape(policy).kv_bytes_per_token == 2 * 28 * 8 * 128 * 2 == 114_688  # bfloat16
    positions = pool_width(384 + recipe["sampler"]["max_new_tokens"])  # data.max_prompt_length + completions
    plan = plan_pool(10**12, pool_shape(policy), positions, 0)
    pool_gb = recipe["sampler"]["num_slots"] * plan.kv_bytes_per_slot / 1e9
    assert positions == 1152 and round(pool_gb, 1) == 2.1
    header = " ".join(line.lstrip("# ") for line in Path("configs/qwen3.yaml").read_text().splitlines()[:12])
    assert "16-slot pool (16 x ~1.15k tokens of K/V in bf16, ~2.1 GB; 114,688 bytes a position" in header


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


@pytest.mark.slow  # a fresh interpreter: this one imported bitsandbytes with peft already
def test_bitsandbytes_is_imported_only_when_a_4bit_model_loads():
    """A LoRA model loads without importing bitsandbytes (peft would, and on CPUs with AVX512-BF16 its import asks the
    hub for a kernel); a 4-bit model loaded after it in the same process still gets peft's 4-bit LoRA layers."""
    import os
    import subprocess
    import sys

    script = """
import sys
from infgrpo.policy.load import load_policy
lora = load_policy("tiny", lora_r=4)
assert "bitsandbytes" not in sys.modules and "peft" in sys.modules
q = load_policy("tiny", lora_r=4, load_in_4bit=True, bnb_4bit_compute_dtype="float32")
import bitsandbytes, peft.tuners.lora.bnb as lora_bnb
layers = [m for m in q.modules() if isinstance(m, lora_bnb.Linear4bit)]
assert len(layers) == 28 and isinstance(layers[0].base_layer, bitsandbytes.nn.Linear4bit), len(layers)
print("ok")
"""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
