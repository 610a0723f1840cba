"""Where one policy update's resident memory goes: its peak RSS rise, and the level and peak between marks.

    python tools/update_rss_timeline.py                          # bench step's update: qwen3-42m, 1 x G=16 x 512
    python tools/update_rss_timeline.py --order 15,1             # the same rows, micro-batches of 15 then 1 rows
    python tools/update_rss_timeline.py --drop-kept-chunk        # the head's backward recomputes its last chunk too

The update of ``bench step --model qwen3-42m`` without the rollout: a random 42M Qwen3 (151,936-token vocabulary,
float32, full fine-tuning), one 20-token prompt x 16 completions of 512 random ids, ``token_budget`` 8192, AdamW
and clipping as the module runs them. A first update creates the optimizer's state; the second is measured (RSS
polled every 2 ms, :class:`~benchmarks.memory.RSSTimeline`). Marks: the chunked head's forward and backward
(start, end), each ``backward`` call and the optimizer step. Prints one JSON line (the rise, the micro-batches'
rows, the rise over the float32 logits of 8 x 512 positions and of the largest micro-batch), then per interval
between marks its start (s), the RSS there and the peak inside it, MiB above the level at the update's start.
Run it in a fresh process per configuration, one thread.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import psutil
import torch

from infgrpo.runtime.host_memory import release_host_memory
from infgrpo.sampler import Rollouts
from infgrpo.update import chunked_head
from infgrpo.update.config import UpdateConfig
from infgrpo.update.runner import PolicyUpdate
from infgrpo.update.shared_prompt import batching as shared_batching
from infgrpo.update.shared_prompt import carry as prompt_carry

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout: benchmarks/ is a folder there, not installed
from benchmarks.memory import RSSTimeline
from benchmarks.models import random_qwen3

MARKS: list[tuple[float, str, int]] = []


def mark(label: str) -> None:
    """Keeps (time, label, RSS now)."""
    MARKS.append((time.perf_counter(), label, psutil.Process().memory_info().rss))


def instrument(drop_kept: bool, no_carry: bool, order: list[int] | None) -> None:
    """Marks around the head's forward and backward; the ablations (see the arguments)."""
    fn = chunked_head.ChunkedLogprobs
    forward, backward = fn.forward, fn.backward

    def marked_forward(ctx, *args):  # noqa: ANN001, ANN202
        mark("head fwd start")
        out = forward(ctx, *args)
        if drop_kept:
            ctx.kept = None
        mark("head fwd end")
        return out

    def marked_backward(ctx, *grads):  # noqa: ANN001, ANN202
        mark("head bwd start")
        out = backward(ctx, *grads)
        mark("head bwd end")
        return out

    fn.forward, fn.backward = staticmethod(marked_forward), staticmethod(marked_backward)
    if no_carry:
        prompt_carry.carried_prompts = lambda mbs: {}
    if order:
        pack = shared_batching.pack_groups_by_token_budget

        def reordered(row_prompt, prompt_lengths, completion_lengths, budget):  # noqa: ANN001, ANN202
            rows = sorted(i for g in pack(row_prompt, prompt_lengths, completion_lengths, budget) for i in g)
            cuts = [sum(order[:k]) for k in range(len(order) + 1)]
            return [rows[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]

        shared_batching.pack_groups_by_token_budget = reordered


def main() -> None:
    """Two updates; prints the second's rise and timeline."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--order", default=None, help="rows per micro-batch in order, e.g. 15,1 (default: the packer's)")
    ap.add_argument("--drop-kept-chunk", action="store_true", help="the head's backward recomputes every chunk")
    ap.add_argument("--no-carry", action="store_true", help="a split group's prompt runs in each micro-batch")
    ap.add_argument("--share-prompt", type=int, default=1, help="1 (bench step's default for Qwen3) or 0")
    ap.add_argument("--token-budget", type=int, default=8192)
    ap.add_argument("--completion-length", type=int, default=512)
    args = ap.parse_args()
    torch.set_num_threads(1)
    instrument(args.drop_kept_chunk, args.no_carry, [int(x) for x in args.order.split(",")] if args.order else None)
    model = random_qwen3().train()
    vocab, c_len = model.config.vocab_size, args.completion_length
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(103, 1000, (20,), generator=g).tolist()
    comps = [torch.randint(103, vocab, (c_len,), generator=g).tolist() for _ in range(16)]
    rollouts = Rollouts([prompt], 16, comps, [torch.zeros(c_len) for _ in comps], ["length"] * 16)
    advantages = torch.tensor([1.0 if i % 2 else -1.0 for i in range(16)])
    update = UpdateConfig(token_budget=args.token_budget, skip_zero_advantage="off")
    updater = PolicyUpdate(update, max_completion_length=c_len, share_prompt=bool(args.share_prompt))

    def step() -> None:
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        mark("opt start")
        opt.step()
        mark("opt end")

    def backward(loss: torch.Tensor) -> None:
        mark("backward start")
        loss.backward()
        mark("backward end")

    def zero() -> None:
        opt.zero_grad(set_to_none=True)

    updater.run(model, rollouts, advantages, backward, step, zero)  # the optimizer's state
    release_host_memory()  # as the module does at a phase's start
    MARKS.clear()
    timeline = RSSTimeline().__enter__()
    time.sleep(0.05)
    start = time.perf_counter()
    mark("update start")
    updater.run(model, rollouts, advantages, backward, step, zero)
    mark("update end")
    end = time.perf_counter()
    timeline.__exit__()
    rise, base = timeline.rise(start, end)
    rows = [len(mb.rows) for mb in updater.pack(rollouts, args.token_budget)]
    largest = max(rows) * c_len * vocab * 4
    print(json.dumps({
        "args": vars(args), "rise_mib": round(rise / 2**20, 1), "micro_batch_rows": rows,
        "rise_over_8x512_logits": round(rise / (8 * c_len * vocab * 4), 3),
        "rise_over_largest_micro_batch_logits": round(rise / largest, 3),
    }))  # fmt: skip
    for (ta, label, ra), (tb, _, rb) in zip(MARKS, MARKS[1:], strict=False):
        inside = [r for t, r in timeline.samples if ta <= t <= tb] + [ra, rb]
        print(
            f"{ta - start:7.2f} s  {label:<15} at {(ra - base) / 2**20:8.1f}  peak {(max(inside) - base) / 2**20:8.1f}"
        )


if __name__ == "__main__":
    main()
