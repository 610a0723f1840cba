"""A group's prompt run once in a pass, however many micro-batches its completions span (``share_prompt``).

When a group's completions do not fit one micro-batch, the packer gives them consecutive micro-batches
whose only prompt is theirs (:func:`~infgrpo.update.shared_prompt.batching.pack_groups_by_token_budget`). In a
pass over the micro-batches (the policy gradient, or a frozen pass without gradients),
:class:`PromptCarry` runs such a prompt's forward in its first micro-batch and keeps what the
completions read of it, every layer's K/V and its last position's output, for the others:

- without gradients: the tensors themselves;
- with gradients: the micro-batches before the last read detached copies that collect their
  completions' gradient (``.grad``); the last reads the prompt forward's own tensors through
  :class:`AddGrad`, which adds the collected gradient to theirs. So the prompt's backward runs once,
  inside the last micro-batch's backward, under the loss scaling and the DDP synchronization of the
  rest (nothing is differentiated outside the caller's ``backward``).

The gradient is the sum the recomputing path would take, added in another order: equal up to
rounding. Memory: the prompt's activations live across its group's micro-batches, as they lived in
each of them when each ran the prompt again (the token budget counts the prompt in every micro-batch),
plus one gradient per carried tensor (layers x 2 x (1, kv_heads, P, head_dim), and the last output).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from infgrpo.update.shared_prompt.batching import SharedMicroBatch

PromptOutputs = tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]
"""What the completions read of a prompt forward: each layer's (K, V), (n_p, kv_heads, P, head_dim) each,
and the output at the prompt's last position, (n_p, 1, H) hidden states or (n_p, 1, V) logits."""


def carried_prompts(mbs: list) -> dict[int, int]:
    """The prompts a pass over ``mbs`` runs once: prompt index -> the number of micro-batches it spans.

    A prompt is carried when it is the only prompt of two or more micro-batches that follow each other
    and of no other (so between its first and its last micro-batch nothing else holds memory).
    """
    seen: dict[int, list[int]] = {}
    alone: dict[int, bool] = {}
    for k, mb in enumerate(mbs):
        for key in mb.once_prompts:
            seen.setdefault(key, []).append(k)
            alone[key] = alone.get(key, True) and len(mb.once_prompts) == 1
    return {key: len(ks) for key, ks in seen.items() if len(ks) > 1 and alone[key] and ks[-1] - ks[0] == len(ks) - 1}


class AddGrad(torch.autograd.Function):
    """Identity on ``tensors`` whose backward adds ``extra`` (a gradient per tensor, or None) to theirs."""

    @staticmethod
    def forward(ctx, extra, *tensors):  # noqa: ANN001, ANN205 - autograd.Function
        """Views of ``tensors``, unchanged."""
        ctx.extra = extra
        ctx.set_materialize_grads(False)
        return tuple(t.view_as(t) for t in tensors)

    @staticmethod
    def backward(ctx, *grads):  # noqa: ANN001, ANN205 - autograd.Function
        """Each incoming gradient plus its ``extra`` (None where both are None)."""
        out = [a if g is None else g if a is None else g + a for g, a in zip(grads, ctx.extra, strict=True)]
        return None, *out


class _Kept:
    """One carried prompt's outputs during the pass, and the copies its gradient gathers in."""

    def __init__(self, outputs: PromptOutputs, uses: int) -> None:
        kv, last = outputs
        self.roots = [t for pair in kv for t in pair] + [last]
        self.grad = torch.is_grad_enabled() and any(t.requires_grad for t in self.roots)
        self.leaves = [t.detach().requires_grad_(t.requires_grad) for t in self.roots] if self.grad else self.roots
        self.left = uses

    def read(self) -> PromptOutputs:
        """The tensors for the next micro-batch: the copies, or at the last one the roots with the copies' gradient."""
        self.left -= 1
        tensors = self.leaves
        if self.grad and self.left == 0:
            extra = tuple(leaf.grad for leaf in self.leaves)
            tensors = list(AddGrad.apply(extra, *self.roots))
        return [(tensors[i], tensors[i + 1]) for i in range(0, len(tensors) - 1, 2)], tensors[-1]


class PromptCarry:
    """The carried prompts of one pass over ``mbs`` (see the module docstring); create one per pass.

    ``outputs(mb, forward)`` returns what ``forward()`` (the prompt forward of ``mb``) returns, running
    it only in the first micro-batch of a carried prompt. The pass must visit ``mbs`` in order, each once.
    """

    def __init__(self, mbs: list) -> None:
        self.uses = carried_prompts(mbs)
        self.kept: dict[int, _Kept] = {}

    def outputs(self, mb: SharedMicroBatch, forward: Callable[[], PromptOutputs]) -> PromptOutputs:
        """The prompt outputs of ``mb``: ``forward()``'s, computed once per carried prompt."""
        key = mb.prompts[0] if len(mb.prompts) == 1 else None
        if key not in self.uses:
            return forward()
        if key not in self.kept:
            self.kept[key] = _Kept(forward(), self.uses[key])
        kept = self.kept[key]
        outputs = kept.read()
        if kept.left == 0:
            del self.kept[key]  # the last micro-batch holds what it needs
        return outputs
