"""Builds the embedded default: tokenizer, synthetic data and a warm-started tiny Qwen3 model.

    python -m infgrpo.assets.build            # writes infgrpo/assets/tiny-qwen3 and tiny-data
    python -m infgrpo.assets.build --steps 50 --out /tmp/tiny   # a quick smoke build

Steps: 1) build the character tokenizer; 2) draw the train / held-out eval splits of the synthetic
task; 3) initialize a ~0.6M-parameter Qwen3 model; 4) warm-start it by supervised training on
*noisy* demonstrations: with probability ``flaw_rate`` the demonstration is the flawed answer of
:func:`infgrpo.assets.task.flawed` (stopped one item early). The result samples correct and
premature answers alike, which is the state in which GRPO has something to improve. Everything is
seeded, so a rebuild gives the same files on the same torch version.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase, Qwen3Config, Qwen3ForCausalLM

from infgrpo.assets import TINY_DATA_DIR, TINY_MODEL_DIR
from infgrpo.assets.task import flawed, make_split
from infgrpo.assets.tokenizer import build_tokenizer


def tiny_config(vocab_size: int, eos_id: int, pad_id: int) -> Qwen3Config:
    """The tiny default architecture: 4 layers, hidden 128, GQA 4/2 heads, 256 positions."""
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
    )


def chat_prompt_ids(tokenizer: PreTrainedTokenizerBase, prompt: str) -> list[int]:
    """Token ids of ``prompt`` as a user turn in the chat template, ending at the assistant turn."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def pad_batch(seqs: list[list[int]], labels: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (B, T) input ids and labels (-100 where a label is masked or padded)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id)
    lab = torch.full((len(seqs), width), -100)
    for i, (s, lb) in enumerate(zip(seqs, labels, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        lab[i, : len(lb)] = torch.tensor(lb)
    return ids, lab


def _sft_batch(
    tokenizer: PreTrainedTokenizerBase, rows: list[dict], rng: random.Random, flaw_rate: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (B, T) input ids and labels (-100 outside the completion)."""
    seqs, labels = [], []
    for row in rows:
        p = row["prompt_ids"]
        c = row["flawed_ids"] if rng.random() < flaw_rate else row["answer_ids"]
        seqs.append(p + c)
        labels.append([-100] * len(p) + c)
    return pad_batch(seqs, labels, tokenizer.pad_token_id)


def supervised_steps(
    model: torch.nn.Module, steps: int, lr: float, loss_at: Callable[[int], torch.Tensor]
) -> Iterator[tuple[int, torch.Tensor]]:
    """Every warm start's recipe: ``steps`` AdamW steps (weight decay 0.01; one-cycle learning rate peaking at ``lr``
    after 5 % of the steps; gradients clipped to norm 1) on the loss ``loss_at(step)``; yields (step, loss) after
    each step, the model in train mode, and leaves it in eval mode."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    model.train()
    for step in range(steps):
        loss = loss_at(step)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        yield step, loss
    model.eval()


def fit_supervised(
    model: Qwen3ForCausalLM, next_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]], steps: int, lr: float
) -> None:
    """:func:`supervised_steps` on the (ids, labels) batches ``next_batch`` draws."""

    def loss_at(step: int) -> torch.Tensor:
        ids, lab = next_batch()
        return model(input_ids=ids, labels=lab).loss

    for step, loss in supervised_steps(model, steps, lr, loss_at):
        if step % 200 == 0 or step == steps - 1:
            print(f"warm-start step {step:5d}  loss {loss.item():.4f}", flush=True)


def warm_start(
    model: Qwen3ForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    rows: list[dict],
    steps: int,
    batch_size: int,
    lr: float,
    flaw_rate: float,
    seed: int,
) -> None:
    """Supervised training on noisy demonstrations (cosine learning rate, AdamW)."""
    rng = random.Random(seed)
    eos = [tokenizer.eos_token_id]
    rows = [
        {
            "prompt_ids": chat_prompt_ids(tokenizer, r["prompt"]),
            "answer_ids": tokenizer(r["answer"], add_special_tokens=False)["input_ids"] + eos,
            "flawed_ids": tokenizer(flawed(r["prompt"]), add_special_tokens=False)["input_ids"] + eos,
        }
        for r in rows
    ]
    fit_supervised(model, lambda: _sft_batch(tokenizer, rng.sample(rows, batch_size), rng, flaw_rate), steps, lr)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """Writes ``rows`` as JSON lines, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def save_model(model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerBase, model_dir: Path) -> None:
    """Saves the model with its tokenizer as a Hugging Face model directory (EOS and padding set for ``generate``)."""
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {model_dir} ({n / 1e6:.2f}M parameters)")


def build_parser(
    doc: str | None, steps: int, batch_size: int, lr: float, n_train: int, n_eval: int
) -> argparse.ArgumentParser:
    """The command line every asset build shares (output folder, warm-start length, split sizes, seed)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="root folder (default: the package)")
    ap.add_argument("--steps", type=int, default=steps, help="warm-start optimizer steps")
    ap.add_argument("--batch-size", type=int, default=batch_size)
    ap.add_argument("--lr", type=float, default=lr)
    ap.add_argument("--n-train", type=int, default=n_train)
    ap.add_argument("--n-eval", type=int, default=n_eval)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main(argv: list[str] | None = None) -> None:
    """Builds the tokenizer, the synthetic data and the warm-started tiny model (see the module docstring)."""
    ap = build_parser(__doc__, steps=1200, batch_size=64, lr=3e-3, n_train=8000, n_eval=500)
    ap.add_argument("--flaw-rate", type=float, default=0.6, help="share of flawed demonstrations")
    args = ap.parse_args(argv)
    model_dir = args.out / "tiny-qwen3" if args.out else TINY_MODEL_DIR
    data_dir = args.out / "tiny-data" if args.out else TINY_DATA_DIR

    # 1) tokenizer
    tokenizer = build_tokenizer()
    # 2) data splits
    train = [p.as_row() for p in make_split(args.n_train, "train", seed=args.seed)]
    held = [p.as_row() for p in make_split(args.n_eval, "eval", seed=args.seed + 1)]
    write_jsonl(data_dir / "train.jsonl", train)
    write_jsonl(data_dir / "eval.jsonl", held)
    # 3) model
    torch.manual_seed(args.seed)
    config = tiny_config(len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    model = Qwen3ForCausalLM(config)
    # 4) warm start on noisy demonstrations
    warm_start(model, tokenizer, train, args.steps, args.batch_size, args.lr, args.flaw_rate, args.seed)
    save_model(model, tokenizer, model_dir)
    print(f"wrote {data_dir}")


if __name__ == "__main__":
    main()
