"""Peak memory of scoring G completions a prompt with a reward model: token-budget micro-batches against one batch.

    python -m benchmarks reward-model --json benchmarks/reward_model_cpu.json
    python -m benchmarks reward-model --prompts 1 --group-sizes 2 4 --layers 1 --hidden 64  # seconds

TRL scores all B x G completions with a reward model in one padded batch, so its activations grow with G;
:class:`~infgrpo.rewards.reward_model.RewardModel` scores them in micro-batches of at most ``--token-budget``
padded tokens. Each configuration (G, and the scoring: ``micro-batched`` = ``RewardModel.__call__``, or
``one batch`` = TRL's rule, the same texts tokenized with ``padding=True`` and run at once) is one fresh process:
a random-init Qwen3ForSequenceClassification (``--hidden`` x ``--layers``, ~25M parameters by default; the tiny
tokenizer, one character a token) is built and warmed up on two texts, then ``--prompts`` conversational prompts x
G completions (``--min-tokens`` to ``--max-tokens`` characters, the same streams at every G: G=8's completions
are G=64's first 8) are scored. Measured around the scoring alone: the rise of peak RSS above the level before
it (``VmHWM`` after the kernel's peak was reset, ``/proc/self/clear_refs``; and the polled ``PeakRSS`` beside
it), the tokens, padded tokens and micro-batches, and the seconds. The second table: each scoring's rise at the
largest G over the smallest.
"""

from __future__ import annotations

import argparse
import gc
import random
import string
import time
from typing import Any

from benchmarks.harness import Benchmark, spawn_all
from benchmarks.memory import PeakRSS, mib
from benchmarks.table import markdown_table, ratio

MODES = ("micro-batched", "one batch")
"""The scorings compared: ours (:class:`~infgrpo.rewards.reward_model.RewardModel`) and TRL's one padded batch."""


def add_args(ap: argparse.ArgumentParser) -> None:
    """The group sizes compared, the rows, the reward model's shape and the budget."""
    ap.add_argument("--group-sizes", type=int, nargs="+", default=[8, 64], help="completions a prompt, each run")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--min-tokens", type=int, default=20, help="shortest completion (tokens = characters)")
    ap.add_argument("--max-tokens", type=int, default=200, help="longest completion")
    ap.add_argument("--token-budget", type=int, default=4096, help="RewardModel's padded tokens a micro-batch")
    ap.add_argument("--hidden", type=int, default=512, help="the reward model's hidden size (64 a head)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per configuration")


def run(args: argparse.Namespace) -> dict:
    """One fresh process per (G, scoring)."""
    if args.min_tokens < 1 or args.max_tokens < args.min_tokens:
        raise ValueError(f"--min-tokens {args.min_tokens} --max-tokens {args.max_tokens}: need 1 <= min <= max")
    if args.hidden % 64 or args.hidden < 64:
        raise ValueError(f"--hidden {args.hidden}: a multiple of 64 (the head size)")
    job = {
        k: v for k, v in vars(args).items() if k not in ("group_sizes", "modes", "timeout", "json", "one", "command")
    }
    configs = [{**job, "group_size": g, "mode": mode} for g in args.group_sizes for mode in args.modes]
    return {"job": job, "rows": spawn_all("reward-model", configs, timeout=args.timeout)}


def build_model(hidden: int, layers: int, vocab: int, pad_id: int, seed: int) -> Any:
    """A random-init Qwen3ForSequenceClassification with one label (heads of 64, 2 query heads per key head)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForSequenceClassification

    torch.manual_seed(seed)
    heads = hidden // 64
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=64,
        max_position_embeddings=1024,
        num_labels=1,
        pad_token_id=pad_id,
    )
    return Qwen3ForSequenceClassification(config).eval()


def rows_for(prompts: int, group_size: int, min_tokens: int, max_tokens: int, seed: int) -> tuple[list, list]:
    """``prompts`` x ``group_size`` conversational rows; completion j of a prompt is the same at every G."""
    letters = string.ascii_lowercase + " " * 6
    prompt_rows, completions = [], []
    for p in range(prompts):
        rng = random.Random(f"{seed}-prompt-{p}")
        question = "".join(rng.choices(letters, k=rng.randint(40, 80)))
        prompt = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": question}]
        for j in range(group_size):
            rng = random.Random(f"{seed}-prompt-{p}-completion-{j}")
            text = "".join(rng.choices(letters, k=rng.randint(min_tokens, max_tokens)))
            prompt_rows.append(prompt)
            completions.append([{"role": "assistant", "content": text}])
    return prompt_rows, completions


def one_batch(rm: Any, prompts: list, completions: list) -> list[float]:
    """TRL's scoring: the same texts in one padded batch (right padding, no special tokens), ``logits[:, 0]``."""
    import torch

    from infgrpo.rewards.reward_scoring import reward_texts

    texts = reward_texts(prompts, completions, rm.tokenizer, rm.chat_template_kwargs)
    inputs = rm.tokenizer(texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    with torch.inference_mode():
        return rm.model(**inputs).logits[:, 0].float().tolist()


def _status_kib(field: str) -> int:
    for line in open("/proc/self/status").read().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> bool:
    """Resets the kernel's peak RSS of this process (VmHWM) to its current RSS; False where that is refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def run_one(cfg: dict) -> dict:
    """Scores ``cfg['prompts']`` x ``cfg['group_size']`` completions one way, measured in this process."""
    from infgrpo.policy import load_tokenizer
    from infgrpo.rewards.reward_model import RewardModel
    from infgrpo.rewards.reward_scoring import micro_batches, reward_texts

    tok = load_tokenizer("tiny")
    model = build_model(cfg["hidden"], cfg["layers"], len(tok), tok.pad_token_id, cfg["seed"])
    rm = RewardModel(model, tokenizer=tok, token_budget=cfg["token_budget"])
    prompts, completions = rows_for(
        cfg["prompts"], cfg["group_size"], cfg["min_tokens"], cfg["max_tokens"], cfg["seed"]
    )
    texts = reward_texts(prompts, completions, tok)
    lengths = [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]
    if cfg["mode"] == "micro-batched":
        batches = micro_batches(lengths, cfg["token_budget"])
        score = rm
    else:
        batches = [list(range(len(texts)))]
        score = lambda p, c: one_batch(rm, p, c)  # noqa: E731
    padded = [len(b) * max(lengths[i] for i in b) for b in batches]
    score(prompts[:2], completions[:2])  # warm-up: lazy initializations out of the figures
    del texts
    gc.collect()
    hwm_reset = _reset_peak()
    base_kib = _status_kib("VmRSS")
    start = time.perf_counter()
    with PeakRSS() as rss:
        scores = score(prompts, completions)
    wall = time.perf_counter() - start
    hwm_kib = _status_kib("VmHWM")
    return {
        **cfg,
        "completions": len(scores),
        "tokens": sum(lengths),
        "padded_tokens": sum(padded),
        "micro_batches": len(batches),
        "largest_batch_tokens": max(padded),
        "parameters": sum(p.numel() for p in model.parameters()),
        "hwm_reset": hwm_reset,
        "rss_base_bytes": base_kib * 1024,
        "rss_rise_bytes": (hwm_kib - base_kib) * 1024,
        "rss_rise_polled_bytes": rss.peak - rss.base,
        "score_mean": sum(scores) / len(scores),
        "wall_s": wall,
    }


def tables(result: dict) -> str:
    """One row per (G, scoring); then each scoring's peak-RSS rise at the largest G over the smallest."""
    rows = result["rows"]
    columns: list[Any] = [
        ("G", lambda r: r["group_size"]), ("scoring", lambda r: r["mode"]),
        ("completions", lambda r: r["completions"]), ("tokens", lambda r: f"{r['tokens']:,}"),
        ("padded tokens", lambda r: f"{r['padded_tokens']:,}"), ("micro-batches", lambda r: r["micro_batches"]),
        ("largest batch (padded tokens)", lambda r: f"{r['largest_batch_tokens']:,}"),
        ("peak RSS rise MiB", lambda r: mib(r["rss_rise_bytes"])),
        ("polled rise MiB", lambda r: mib(r["rss_rise_polled_bytes"])),
        ("mean score", lambda r: f"{r['score_mean']:.4f}"), ("s", lambda r: f"{r['wall_s']:.1f}"),
    ]  # fmt: skip
    text = markdown_table(columns, rows, keys=2)
    done = [r for r in rows if "skipped" not in r]
    sizes = sorted({r["group_size"] for r in done})
    if len(sizes) < 2:
        return text
    lo, hi = sizes[0], sizes[-1]
    ratios = []
    for mode in MODES:
        pair = {r["group_size"]: r for r in done if r["mode"] == mode and r["group_size"] in (lo, hi)}
        if len(pair) == 2:
            ratios.append({"mode": mode, "lo": pair[lo], "hi": pair[hi]})
    columns = [
        ("scoring", lambda r: r["mode"]),
        (f"peak RSS rise G={lo} MiB", lambda r: mib(r["lo"]["rss_rise_bytes"])),
        (f"G={hi} MiB", lambda r: mib(r["hi"]["rss_rise_bytes"])),
        (f"G={hi} / G={lo}", lambda r: ratio(r["hi"]["rss_rise_bytes"], r["lo"]["rss_rise_bytes"])),
        (f"polled G={hi} / G={lo}", lambda r: ratio(r["hi"]["rss_rise_polled_bytes"],
                                                     r["lo"]["rss_rise_polled_bytes"])),
    ]  # fmt: skip
    return text + "\n\n" + markdown_table(columns, ratios, keys=1)


BENCH = Benchmark("reward-model", __doc__, add_args, run, tables, run_one=run_one, threads=1)


def main(argv: list[str] | None = None) -> dict:
    """``python -m benchmarks reward-model``."""
    return BENCH.main(argv)
