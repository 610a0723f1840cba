import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM  # noqa: E402

from infgrpo.models import load_policy, load_tokenizer  # noqa: E402

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tokenizer():
    return load_tokenizer("tiny")


@pytest.fixture(scope="session")
def tiny_model():
    return load_policy("tiny").eval()


def random_model(arch: str, dtype: torch.dtype = torch.float32, vocab: int = 103, seed: int = 0, **config):
    """A freshly initialized tiny model of the given architecture (eos id 2, pad id 0); ``config`` overrides."""
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=2,
        pad_token_id=0,
    )
    common.update(config)
    if arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=16, **common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    return model.to(dtype).eval()


@pytest.fixture
def prompts(tokenizer):
    from infgrpo.data.datamodule import encode_prompt

    return [encode_prompt(tokenizer, p, None, True) for p in ("rev abcdefg", "count 3 9", "dup ab")]
