"""Counts what one policy update asks of the machine, shared prompts or not: aten operators, scalar reads.

    python tools/count_update_ops.py     # the tiny model, 2 prompts x G=8, 24-token completions, budget 4096
    python tools/count_update_ops.py --token-budget 128   # each group over two micro-batches

On a GPU every aten operator is a kernel launch (or a view) and every scalar read (``_local_scalar_dense``,
what ``.item()`` dispatches) a host sync; counting them on a CPU says what the update will ask of a GPU.
"""

from __future__ import annotations

import argparse

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from infgrpo.policy.load import load_policy
from infgrpo.sampler import Rollouts
from infgrpo.update.config import UpdateConfig
from infgrpo.update.runner import PolicyUpdate


class Count(TorchDispatchMode):
    """Counts dispatched aten operators and scalar reads."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.ops += 1
        self.reads += func is torch.ops.aten._local_scalar_dense.default
        return func(*args, **(kwargs or {}))


def main() -> None:
    """Prints the counts of one update, shared and unshared."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--token-budget", type=int, default=4096, help="padded tokens per micro-batch")
    budget = ap.parse_args().token_budget
    torch.manual_seed(0)
    model = load_policy("tiny", lora_r=4).train()
    prompts = [[5, 6, 7, 8, 9, 10, 11, 12] * 4, [13, 14, 15, 16] * 6]
    completions = [[20 + (i + j) % 50 for j in range(24)] for i in range(16)]
    rolls = Rollouts(prompts, 8, completions, [torch.zeros(24) for _ in completions], ["stop"] * 16)
    advantages = torch.tensor([1.0 if i % 2 else -1.0 for i in range(16)])
    for share in (False, True):
        update = UpdateConfig(token_budget=budget, skip_zero_advantage="off")
        updater = PolicyUpdate(update, max_completion_length=24, share_prompt=share)
        with Count() as count:
            updater.run(model, rolls, advantages, lambda loss: loss.backward(), lambda: None, model.zero_grad)
        print(f"token_budget={budget} share_prompt={share}: {count.ops:,} aten operators, {count.reads} scalar reads")


if __name__ == "__main__":
    main()
