"""Builds the shipped tiny vision-language models and their visual task, warm-started as ``tiny`` was.

    python tools/build_tiny_vlms.py      # writes infgrpo/assets/tiny-qwen2.5-vl, tiny-idefics3, tiny-shapes
    python tools/build_tiny_vlms.py --steps 50 --out /tmp/vlms --families idefics3     # a quick smoke build
    python tools/build_tiny_vlms.py --families qwen2_5_vl --steps 4000 --warm-rows 32000   # the shipped tiny-vl

The shipped ``tiny-vl`` was rebuilt with the last command (#62's learning target; ~45 min on one core): warm-started
on 32,000 rows drawn apart from the train split, it answers every held-out row right or flawed (greedy 60.5 % right,
39.5 % flawed of 200; sampled 52.0 / 47.5 %), so GRPO's job is the flaw alone. ``tiny-idefics3`` is the default
build's (1,500 steps on the train split).

Steps: 1) the shapes task's splits (:mod:`infgrpo.assets.shapes`), written as parquet files with a ``datasets.Image``
column (TRL's ``image``); 2) for each family of :mod:`infgrpo.assets.tiny_vlm`: tokenizer, random model, the stock
processor files, loaded back through :func:`infgrpo.vision.processor.load_processor` (the path training takes);
3) a warm start by supervised training on *noisy* demonstrations: with probability ``--flaw-rate`` the target is the
task's flawed answer (the last colour left out, a count one short), so the model samples right and flawed answers
alike; 4) the held-out accuracy of greedy and sampled answers, and the share of flawed ones, printed. Everything is
seeded; the build lives here, above the package, because it uses the package's loading path (``vision/``), which
``assets/`` may not import. Pillow and the shapes task are all it needs besides the package.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText, PreTrainedModel
from transformers.processing_utils import ProcessorMixin

from infgrpo.assets import ASSETS_DIR
from infgrpo.assets.build import supervised_steps
from infgrpo.assets.shapes import make_split
from infgrpo.assets.tiny_vlm import tiny_vlm_config, vlm_tokenizer, write_processor_files
from infgrpo.vision.families import banned_token_ids
from infgrpo.vision.processor import load_processor

FOLDERS = {"qwen2_5_vl": "tiny-qwen2.5-vl", "idefics3": "tiny-idefics3"}


def write_splits(folder: Path, train: list[dict], held: list[dict]) -> None:
    """The splits as ``train.parquet`` / ``eval.parquet``: ``prompt``, ``image`` (a ``datasets.Image``), ``answer``,
    ``kind``."""
    import datasets

    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("eval", held)):
        columns = {k: [r[k] for r in rows] for k in ("prompt", "image", "answer", "kind")}
        ds = datasets.Dataset.from_dict(columns).cast_column("image", datasets.Image())
        ds.to_parquet(str(folder / f"{name}.parquet"))
    print(f"wrote {folder} ({len(train)} train, {len(held)} eval rows)")


def conversation(row: dict) -> list[dict]:
    """The row's prompt with its image injected before the text (TRL's rule, for one user message)."""
    text = row["prompt"][0]["content"]
    return [{"role": "user", "content": [{"type": "image", "image": row["image"]}, {"type": "text", "text": text}]}]


def sft_batch(processor: ProcessorMixin, rows: list[dict], rng: random.Random, flaw_rate: float) -> dict:
    """Left-padded prompt + target rows through the processor, with labels on the target and the end token only."""
    tok = processor.tokenizer
    prompts = [processor.apply_chat_template(conversation(r), add_generation_prompt=True, tokenize=False) for r in rows]
    targets = [(r["flawed"] if rng.random() < flaw_rate else r["answer"]) + tok.eos_token for r in rows]
    images = [[r["image"]] for r in rows]
    batch = processor(text=[p + t for p, t in zip(prompts, targets, strict=True)], images=images, padding=True,
                      return_tensors="pt")  # fmt: skip
    labels = torch.full_like(batch["input_ids"], -100)
    for i, target in enumerate(targets):
        n = len(tok(target, add_special_tokens=False)["input_ids"])
        labels[i, -n:] = batch["input_ids"][i, -n:]  # left padding: the target is the row's last n tokens
    batch["labels"] = labels
    return batch


def warm_start(model: PreTrainedModel, processor: ProcessorMixin, rows: list[dict], args: argparse.Namespace) -> None:
    """The warm-start recipe (:func:`~infgrpo.assets.build.supervised_steps`) on noisy demonstrations."""
    rng = random.Random(args.seed)
    start = time.time()

    def loss_at(step: int) -> torch.Tensor:
        return model(**sft_batch(processor, rng.sample(rows, args.batch_size), rng, args.flaw_rate)).loss

    for step, loss in supervised_steps(model, args.steps, args.lr, loss_at):
        if step % 100 == 0 or step == args.steps - 1:
            print(f"  warm-start step {step:5d}  loss {loss.item():.4f}  ({time.time() - start:.0f} s)", flush=True)


def shapes_in(row: dict) -> int:
    """The number of shapes in a row's image, read off its answer."""
    return int(row["answer"]) if row["kind"] == "count" else len(row["answer"].split())


@torch.no_grad()
def held_out_accuracy(model: PreTrainedModel, processor: ProcessorMixin, rows: list[dict], sample: bool) -> tuple:
    """(share correct, share flawed, {(kind, shapes): (right, flawed, rows)}) of one answer per held-out row, greedy
    or sampled at temperature 1."""
    tok, right, flawed, by = processor.tokenizer, 0, 0, {}
    torch.manual_seed(0)
    for i in range(0, len(rows), 50):
        chunk = rows[i : i + 50]
        batch = processor.apply_chat_template(
            [conversation(r) for r in chunk], add_generation_prompt=True, tokenize=True, return_dict=True,
            padding=True, return_tensors="pt",
        )  # fmt: skip
        out = model.generate(
            **batch, max_new_tokens=32, do_sample=sample, temperature=1.0, top_k=0, top_p=1.0,
            suppress_tokens=banned_token_ids(model.config), pad_token_id=tok.pad_token_id,
        )  # fmt: skip
        texts = tok.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        for text, row in zip(texts, chunk, strict=True):
            tally = by.setdefault((row["kind"], shapes_in(row)), [0, 0, 0])
            tally[0] += text.strip() == row["answer"]
            tally[1] += text.strip() == row["flawed"]
            tally[2] += 1
    right, flawed = sum(t[0] for t in by.values()), sum(t[1] for t in by.values())
    return right / len(rows), flawed / len(rows), {key: tuple(by[key]) for key in sorted(by)}


def build_family(family: str, root: Path, train: list[dict], held: list[dict], args: argparse.Namespace) -> None:
    """Builds, warm-starts, measures and saves one family's tiny model (see the module docstring)."""
    folder = root / FOLDERS[family]
    tokenizer = vlm_tokenizer(family)
    torch.manual_seed(args.seed)
    config = tiny_vlm_config(family, tokenizer)
    for part in (config, config.get_text_config(), config.vision_config):  # a wider start makes outputs see the image
        part.initializer_range = args.init_range
    model = AutoModelForImageTextToText.from_config(config)
    write_processor_files(family, tokenizer, folder)
    model.config.save_pretrained(folder)  # load_processor reads the config: a VLM's processor
    processor = load_processor(str(folder))
    start = time.time()
    warm = make_split(args.warm_rows, "train", seed=args.seed + 2) if args.warm_rows else train
    warm_start(model, processor, warm, args)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {folder} ({n / 1e6:.2f}M parameters, warm start {time.time() - start:.0f} s)")
    for sample in (False, True):
        right, flawed, by = held_out_accuracy(model, processor, held[: args.n_measure], sample)
        how = "sampled (T=1)" if sample else "greedy"
        print(f"  {how:14} held-out: {right:.1%} correct, {flawed:.1%} flawed ({args.n_measure} rows)")
        for (kind, shapes), (r, f, n) in by.items():
            print(f"    {kind:8} {shapes} shapes: {r / n:.0%} correct, {f / n:.0%} flawed, {n} rows")


def main(argv: list[str] | None = None) -> None:
    """Builds the task's splits and the tiny models of ``--families`` (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="root folder (default: the package's assets)")
    ap.add_argument("--families", nargs="+", default=list(FOLDERS), choices=list(FOLDERS))
    ap.add_argument("--steps", type=int, default=1500, help="warm-start optimizer steps")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--flaw-rate", type=float, default=0.5, help="share of flawed demonstrations")
    ap.add_argument("--n-train", type=int, default=4000)
    ap.add_argument("--n-eval", type=int, default=500)
    ap.add_argument(
        "--warm-rows",
        type=int,
        default=0,
        help="rows of the warm start, drawn apart from the shipped train split (0: that split)",
    )
    ap.add_argument("--n-measure", type=int, default=200, help="held-out rows measured after the warm start")
    ap.add_argument("--init-range", type=float, default=0.02, help="initializer_range of the random weights")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    root = args.out or ASSETS_DIR
    torch.set_num_threads(max(1, torch.get_num_threads()))

    # 1) the task
    train = make_split(args.n_train, "train", seed=args.seed)
    held = make_split(args.n_eval, "eval", seed=args.seed + 1)
    write_splits(root / "tiny-shapes", train, held)
    # 2-4) the models
    for family in args.families:
        build_family(family, root, train, held, args)


if __name__ == "__main__":
    main()
