"""Rows into micro-batches of at most a token budget, longest first: the update's and the reward model's packer.

A padded micro-batch of n rows costs n x its width, the width being what each row is padded to. A row may
have parts padded apart (the update's micro-batch left-pads prompts to the longest prompt and right-pads
completions to the longest completion), so the width is the sum of the parts' longest::

    pack_longest_first(4096, prompt_lengths, completion_lengths)   # the update: n x (max P + max C)
    pack_longest_first(4096, lengths)                              # the reward model: n x max length
"""

from __future__ import annotations

from collections.abc import Sequence


def pack_longest_first(token_budget: int, *parts: Sequence[int]) -> list[list[int]]:
    """Groups row indices so that each group's padded size, rows x width, stays within ``token_budget`` tokens.

    ``parts``: one or more sequences of N lengths, the parts of each row that are padded apart; a group's
    width is the sum over the parts of its longest (at least 1: a row costs a token even when empty).
    Rows are taken longest first (by the sum of their parts, ties in row order), which keeps padding low;
    a row wider than the budget on its own forms a group alone. Returns lists of row indices covering every
    row exactly once, the longest rows' group first.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget={token_budget} must be >= 1")
    rows = list(zip(*parts, strict=True))  # (N, parts)
    groups: list[list[int]] = []
    group: list[int] = []
    longest: tuple[int, ...] = ()
    for i in sorted(range(len(rows)), key=lambda i: -sum(rows[i])):
        grown = tuple(max(a, b) for a, b in zip(longest, rows[i], strict=True)) if group else rows[i]
        if group and (len(group) + 1) * max(sum(grown), 1) > token_budget:
            groups.append(group)
            group, grown = [], rows[i]
        group.append(i)
        longest = grown
    if group:
        groups.append(group)
    return groups
