"""Models and prompts for the benchmarks: the shipped tiny default and a larger random Qwen3."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from transformers import PreTrainedModel, Qwen3Config, Qwen3ForCausalLM

from infgrpo.data.datamodule import encode_prompt, load_rows
from infgrpo.models import load_policy, load_tokenizer

QWEN3_VOCAB = 151_936


def random_qwen3(vocab_size: int = QWEN3_VOCAB, dtype: torch.dtype = torch.float32, seed: int = 0) -> PreTrainedModel:
    """A randomly initialized Qwen3 of about 42M parameters with the real Qwen3 vocabulary.

    Embeddings and LM head (tied) dominate the parameters and the vocabulary dominates logits
    memory, as on a real Qwen3; 4 layers x 2 KV heads x 64 dims keep per-token KV small.
    """
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=0,
        pad_token_id=0,
    )
    return Qwen3ForCausalLM(cfg).to(dtype).eval()


def paper_shape_qwen3(dtype: torch.dtype = torch.bfloat16, device: str = "cuda") -> PreTrainedModel:
    """Qwen3-1.7B's shape (28 layers, hidden 2048, 16/8 heads, vocab 151,936), random weights."""
    cfg = Qwen3Config(
        vocab_size=QWEN3_VOCAB,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
        eos_token_id=0,
        pad_token_id=0,
    )
    with torch.device(device):
        return Qwen3ForCausalLM(cfg).to(dtype).eval()


def bench_setup(
    name: str, num_prompts: int, seed: int = 0, stop_fraction: float = 0.02
) -> tuple[PreTrainedModel, list[list[int]], int, list[int]]:
    """(model, prompt ids, pad id, stop ids) for benchmark model ``name``.

    ``tiny``: the shipped model on held-out synthetic prompts (tasks count, rev, dup in turn); it
    stops at EOS by itself.
    ``qwen3-42m`` / ``qwen3-1.7b-shape``: random weights never pick EOS, so a fixed 2% slice of the
    vocabulary (``stop_fraction``) acts as stop tokens, giving geometric (long-tailed) lengths of mean
    about 1 / stop_fraction, capped at max_new_tokens.
    """
    rng = random.Random(seed)
    if name == "tiny":
        tok = load_tokenizer("tiny")
        by_task = {t: [r for r in load_rows("tiny", "eval") if r["task"] == t] for t in ("count", "rev", "dup")}
        order = ("count", "rev", "dup")  # prompt i is of task order[i % 3]: one prompt = the long task
        rows = [rng.choice(by_task[order[i % 3]]) for i in range(num_prompts)]
        prompts = [encode_prompt(tok, r["prompt"], None, True) for r in rows]
        return load_policy("tiny").eval(), prompts, tok.pad_token_id, [tok.eos_token_id]
    if name == "qwen3-42m":
        model = random_qwen3()
    elif name == "qwen3-1.7b-shape":
        model = paper_shape_qwen3(device="cuda" if torch.cuda.is_available() else "cpu")
    elif Path(name).is_dir():  # a user's own weights: the tiny task's prompts in its tokenizer, its own EOS
        tok = load_tokenizer(name)
        dtype = "bfloat16" if torch.cuda.is_available() else "float32"
        rows = load_rows("tiny", "eval")
        prompts = [encode_prompt(tok, rows[rng.randrange(len(rows))]["prompt"], None, True) for _ in range(num_prompts)]
        return load_policy(name, dtype=dtype).eval(), prompts, tok.pad_token_id, [tok.eos_token_id]
    else:
        raise ValueError(f"model={name!r}; valid: tiny, qwen3-42m, qwen3-1.7b-shape or a local model folder")
    prompts = [[rng.randrange(5000, QWEN3_VOCAB) for _ in range(rng.randint(16, 48))] for _ in range(num_prompts)]
    return model, prompts, 0, list(range(1, max(2, round(QWEN3_VOCAB * stop_fraction))))
