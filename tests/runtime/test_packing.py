"""The longest-first token-budget packer the update and the reward model share."""

import pytest

from infgrpo.runtime.packing import pack_longest_first


def test_a_group_costs_its_rows_times_the_sum_of_its_parts_longest():
    prompts, completions = [2, 9, 1, 9], [9, 2, 1, 2]
    # longest first: rows 0, 1, 3 (11 each), then 2; rows 0 + 1 pad to 9 + 9 = 18 each: 36 > 33
    assert pack_longest_first(33, prompts, completions) == [[0], [1, 3, 2]]  # 3 x (9 + 2) = 33
    assert pack_longest_first(36, prompts, completions) == [[0, 1], [3, 2]]
    assert pack_longest_first(30, [11, 11, 11, 2]) == [[0, 1], [2, 3]]  # one part: rows x longest


def test_a_row_over_the_budget_is_alone_and_an_empty_row_costs_a_token():
    assert pack_longest_first(4, [9, 1, 1]) == [[0], [1, 2]]
    assert pack_longest_first(2, [0, 0, 0]) == [[0, 1], [2]]
    assert pack_longest_first(4) == [] and pack_longest_first(4, []) == []
    with pytest.raises(ValueError, match="token_budget=0 must be >= 1"):
        pack_longest_first(0, [1])
