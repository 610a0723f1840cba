"""Benchmark: the policy update with each prompt once per group (``share_prompt``) against prompt + completion rows.

    python -m benchmarks update --json benchmarks/update_qwen3_42m.json
    python -m benchmarks update --prompt-lengths 64 --completion-lengths 32 --group-sizes 8 --token-budgets 0

One configuration per fresh process: a model of :data:`~benchmarks.models.BENCH_MODELS` (default
``qwen3-42m``: random weights, the real 151,936-id vocabulary, float32) with LoRA r=16 on every linear
layer; a rollout of ``--prompts`` prompts of P tokens x G completions of C tokens (random ids, as the
sampler returns them) with advantages of alternating sign; and one :class:`~infgrpo.update.runner.PolicyUpdate`
on it (one optimizer step, the chunked LM head), after a warm-up update on a small rollout (lazy
initializations out of the measurement). Each shape runs shared (``share_prompt: on``) and unshared
(``off``) side by side. Measured: the update's wall time, its peak memory rise above the start (CUDA:
``max_memory_allocated``; CPU: the process's resident memory, sampled every 2 ms), the micro-batches and
the padded tokens its forwards ran over.

``--token-budgets``: padded tokens per micro-batch; 0 = the whole unshared batch in one micro-batch (no
micro-batching: the memory of the batch's activations), as a budget that fits the step does; 4096 =
``GRPOModule``'s default (both paths then hold about a budget of activations, and the shared one needs
fewer micro-batches).
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.harness import Benchmark, spawn_all
from benchmarks.memory import PeakRSS, mib
from benchmarks.models import BENCH_MODELS, NAMES_HELP, default_device
from benchmarks.table import cell, markdown_table, ratio
from infgrpo.sampler import Rollouts
from infgrpo.update.config import UpdateConfig
from infgrpo.update.runner import PolicyUpdate


def rollout(prompts: int, group: int, prompt_len: int, completion_len: int, vocab: int, seed: int = 0) -> Rollouts:
    """``prompts`` random prompts of ``prompt_len`` ids x ``group`` completions of ``completion_len`` ids."""
    g = torch.Generator().manual_seed(seed)
    low = min(5000, vocab // 2)  # clear of special ids
    prompt_ids = [torch.randint(low, vocab, (prompt_len,), generator=g).tolist() for _ in range(prompts)]
    comps = [torch.randint(low, vocab, (completion_len,), generator=g).tolist() for _ in range(prompts * group)]
    return Rollouts(prompt_ids, group, comps, [torch.zeros(completion_len) for _ in comps], ["stop"] * len(comps))


def lora_model(name: str, rank: int) -> torch.nn.Module:
    """``BENCH_MODELS[name]`` with LoRA of ``rank`` on every linear layer (B nonzero), on the default device."""
    from peft import LoraConfig, get_peft_model

    model = BENCH_MODELS[name].build().to(default_device())
    model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear"))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.01, generator=torch.Generator(p.device).manual_seed(0))
    return model.train()


def update_once(model: torch.nn.Module, rolls: Rollouts, budget: int, share: bool) -> dict:
    """One PolicyUpdate on ``rolls``: its wall time and what it ran (plain SGD; the gradient is what costs)."""
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    update = UpdateConfig(token_budget=budget, skip_zero_advantage="off")
    updater = PolicyUpdate(update, max_completion_length=64, share_prompt=share)
    adv = torch.tensor([1.0 if i % 2 else -1.0 for i in range(len(rolls))])
    start = time.perf_counter()
    result = updater.run(model, rolls, adv, lambda loss: loss.backward(), opt.step, opt.zero_grad)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    packed = updater.pack(rolls, result.token_budget)  # again, outside the clock: what the update ran
    return {
        "update_s": seconds,
        "micro_batches": int(result.stats["micro_batches"]),
        "padded_tokens": sum(mb.padded_tokens for mb in packed),
        "loss": result.stats["loss"],
    }


def run_one(cfg: dict) -> dict:
    """One shape x budget x sharing, in this process: warm up, then measure one update."""
    model = lora_model(cfg["model"], cfg["lora_r"])
    vocab = int(model.config.vocab_size)
    shape = (cfg["prompts"], cfg["group_size"], cfg["prompt_len"], cfg["completion_len"])
    rolls = rollout(*shape, vocab)
    budget = cfg["token_budget"] or cfg["prompts"] * cfg["group_size"] * (cfg["prompt_len"] + cfg["completion_len"])
    update_once(model, rollout(1, 2, 8, 4, vocab, seed=1), budget, cfg["share_prompt"])  # warm-up
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    with PeakRSS() as rss:
        row = update_once(model, rolls, budget, cfg["share_prompt"])
    row.update(cfg, budget=budget, rss_rise_bytes=rss.peak - rss.base, device=default_device())
    row["memory_rise_bytes"] = torch.cuda.max_memory_allocated() - base if cuda else row["rss_rise_bytes"]
    return row


def add_args(ap: argparse.ArgumentParser) -> None:
    """The shapes, budgets and model of the comparison."""
    ap.add_argument("--model", default="qwen3-42m", help=NAMES_HELP)
    ap.add_argument("--prompt-lengths", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--completion-lengths", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--group-sizes", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--prompts", type=int, default=1, help="prompts per step")
    ap.add_argument("--token-budgets", type=int, nargs="+", default=[0, 4096], help="0 = the whole batch at once")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per configuration before skipping it")


def run(args: argparse.Namespace) -> dict:
    """Every (P, C, G, budget), unshared then shared, each in a fresh process."""
    configs = [
        dict(
            model=args.model,
            prompts=args.prompts,
            prompt_len=p,
            completion_len=c,
            group_size=g,
            token_budget=b,
            share_prompt=share,
            lora_r=args.lora_r,
            threads=args.threads,
        )  # fmt: skip
        for b in args.token_budgets
        for p in args.prompt_lengths
        for c in args.completion_lengths
        for g in args.group_sizes
        for share in (False, True)
    ]
    return {"rows": spawn_all("update", configs, timeout=args.timeout)}


def paired(rows: list[dict]) -> list[dict]:
    """Shared rows with the ratios to their unshared twin (same shape and budget)."""
    key = ("prompts", "prompt_len", "completion_len", "group_size", "token_budget")
    plain = {tuple(r[k] for k in key): r for r in rows if not r["share_prompt"] and "skipped" not in r}
    out = []
    for r in rows:
        if not r["share_prompt"]:
            continue
        twin = plain.get(tuple(r[k] for k in key))
        if "skipped" in r or twin is None:
            out.append({**r, "skipped": r.get("skipped", "no unshared twin")})
            continue
        out.append({**r, "twin": twin})
    return out


def tables(result: dict) -> str:
    """Both paths per shape, and the shared one's time and memory as a share of the unshared one's."""
    rows = result["rows"]
    memory = "CUDA rise MiB" if any(r.get("device") == "cuda" for r in rows) else "RSS rise MiB"
    shape = [
        ("prompts x G", lambda r: f"{r['prompts']} x {r['group_size']}"),
        ("prompt", cell("prompt_len")),
        ("completion", cell("completion_len")),
        ("token budget", lambda r: r["token_budget"] or "whole batch"),
    ]
    both = markdown_table(
        [
            *shape,
            ("share_prompt", lambda r: "on" if r["share_prompt"] else "off"),
            ("micro-batches", cell("micro_batches")),
            ("padded tokens", cell("padded_tokens", ",")),
            ("update s", cell("update_s", ".2f")),
            (memory, lambda r: mib(r["memory_rise_bytes"])),
        ],
        rows,
        keys=5,
    )
    ratios = markdown_table(
        [
            *shape,
            ("time shared / unshared", lambda r: ratio(r["update_s"], r["twin"]["update_s"])),
            ("memory shared / unshared", lambda r: ratio(r["memory_rise_bytes"], r["twin"]["memory_rise_bytes"])),
            ("tokens shared / unshared", lambda r: ratio(r["padded_tokens"], r["twin"]["padded_tokens"])),
        ],
        paired(rows),
        keys=4,
    )
    return both + "\n\n" + ratios


BENCH = Benchmark("update", __doc__, add_args, run, tables, run_one=run_one)


def main(argv: list[str] | None = None) -> dict:
    """``python -m benchmarks update``; see the module docstring."""
    return BENCH.main(argv)


if __name__ == "__main__":
    main()
