"""step_metrics, value by value, on hand-built scores: what the module logs as train/<key>."""

import math

import pytest
import torch

from infgrpo.runtime.ranks import Ranks
from infgrpo.scoring import BatchScores
from infgrpo.training.metrics import step_metrics

NAN = float("nan")


def batch():
    # 2 prompts x G=3; the third completion of prompt 0 failed every reward (NaN under skip)
    correct = torch.tensor([1.0, 0.0, NAN, 1.0, 1.0, 1.0])
    fmt = torch.tensor([0.5, 0.5, NAN, 0.0, 0.0, 0.0])
    total = correct + fmt
    return BatchScores(
        total=total,
        lengths=torch.tensor([4.0, 9.0, 2.0, 3.0, 3.0, 16.0]),
        truncated=torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 1.0]),
        failed=torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0, 0.0]),
        parts={"correct": correct, "format": fmt},
    )


STATS = {"decode_steps": 17, "slot_utilization": 0.75, "tokens_per_s": 120.0, "replans": 2, "length_mae": 1.5}
UPDATE = {"loss": 0.25, "kl": 0.01, "micro_batches": 2.0, "update/oom_retries": 0, "update/token_budget": 4096}


def test_every_metric_of_one_process_by_hand():
    m = step_metrics(batch(), STATS, UPDATE, (3.0, 2.0), Ranks(), 1e-4, {}, 3, "correct")
    scored = [1.5, 0.5, 1.0, 1.0, 1.0]
    mean = sum(scored) / 5
    std = math.sqrt(sum((x - mean) ** 2 for x in scored) / 4)  # unbiased, NaN left out
    assert m["reward"] == pytest.approx(mean) and m["reward_std"] == pytest.approx(std)
    assert m["rewards_failed"] == 1.0
    assert m["completion_length"] == pytest.approx(37 / 6) and m["completion_length_max"] == 16.0
    assert m["completions_truncated"] == pytest.approx(1 / 6)
    assert m["frac_reward_zero_std"] == 0.5  # prompt 1's scored rewards are all equal
    assert m["accuracy"] == pytest.approx(4 / 5)  # the failed one left out
    assert m["rewards/correct"] == pytest.approx(4 / 5) and m["rewards/format"] == pytest.approx(1 / 5)
    assert (m["time/rollout_s"], m["time/update_s"]) == (3.0, 2.0)
    assert (m["rollout/decode_steps"], m["rollout/slot_utilization"], m["rollout/tokens_per_s"]) == (17, 0.75, 120)
    assert (m["rollout/replans"], m["rollout/length_mae"]) == (2.0, 1.5)  # schedule telemetry passed through
    assert "rollout/length_spearman" not in m  # only what the sampler reported
    assert (m["lr"], m["loss"], m["update/token_budget"]) == (1e-4, 0.25, 4096)
    assert all(isinstance(v, float) for v in m.values())


def test_one_reward_logs_no_per_reward_means_and_no_accuracy_without_an_accuracy_reward():
    b = batch()
    b.parts = {"correct": b.parts["correct"]}
    m = step_metrics(b, STATS, UPDATE, (1.0, 1.0), Ranks(), 1e-4, {"memory/update_peak_gb": 2.5}, 3, None)
    assert not any(k.startswith("rewards/") for k in m) and "accuracy" not in m
    assert m["memory/update_peak_gb"] == 2.5


def test_times_and_steps_are_the_slowest_ranks_and_utilization_their_mean():
    # rank 0 of 2; the other rank reports rollout 5 s, update 1 s, 30 steps, utilization 0.25
    other = torch.tensor([[5.0, 1.0, 30.0, 0.25]], dtype=torch.float64)
    ranks = Ranks(2, 0, lambda x: torch.stack([x, other]) if x.shape == (1, 4) else torch.stack([x, x]))
    m = step_metrics(batch(), STATS, UPDATE, (3.0, 2.0), ranks, 1e-4, {}, 3, "correct")
    assert (m["time/rollout_s"], m["time/update_s"], m["rollout/decode_steps"]) == (5.0, 2.0, 30.0)
    assert m["rollout/slot_utilization"] == pytest.approx(0.5)
