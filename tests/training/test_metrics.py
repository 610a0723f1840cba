"""step_metrics, value by value, on hand-built scores: what the module logs as train/<key>."""

import math

import pytest
import torch

from infgrpo.runtime.ranks import Ranks
from infgrpo.sampler import DynamicSummary, Rollouts
from infgrpo.sampler.engine.summaries import ToolSummary
from infgrpo.scoring import BatchScores
from infgrpo.training.judged_rollout import JudgedAdaptiveSummary
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


def rollouts(**summaries):
    """This rank's rollout as the metrics read it: the sampler's statistics, and what dynamic sampling and adaptive
    groups found (``dynamic=``, ``adaptive=``)."""
    return Rollouts([], 3, [], [], [], stats=dict(STATS), **summaries)


UPDATE = {"loss": 0.25, "kl": 0.01, "micro_batches": 2.0, "update/oom_retries": 0, "update/token_budget": 4096}


def test_every_metric_of_one_process_by_hand():
    m = step_metrics(batch(), rollouts(), UPDATE, (3.0, 2.0), Ranks(), 1e-4, {}, 3, "correct")
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
    m = step_metrics(b, rollouts(), UPDATE, (1.0, 1.0), Ranks(), 1e-4, {"memory/update_peak_gb": 2.5}, 3, None)
    assert not any(k.startswith("rewards/") for k in m) and "accuracy" not in m
    assert m["memory/update_peak_gb"] == 2.5


def test_times_and_steps_are_the_slowest_ranks_and_utilization_their_mean():
    # rank 0 of 2; the other rank reports rollout 5 s, update 1 s, 30 steps, utilization 0.25
    other = torch.tensor([[5.0, 1.0, 30.0, 0.25]], dtype=torch.float64)
    ranks = Ranks(2, 0, lambda x: torch.stack([x, other]) if x.shape == (1, 4) else torch.stack([x, x]))
    m = step_metrics(batch(), rollouts(), UPDATE, (3.0, 2.0), ranks, 1e-4, {}, 3, "correct")
    assert (m["time/rollout_s"], m["time/update_s"], m["rollout/decode_steps"]) == (5.0, 2.0, 30.0)
    assert m["rollout/slot_utilization"] == pytest.approx(0.5)


def test_dynamic_and_adaptive_counts_are_summed_over_ranks_their_means_averaged_and_their_max_the_largest():
    # rank 0 of 2; rank 1's contributions to each collective are recorded from its own call of step_metrics
    mine = rollouts(
        dynamic=DynamicSummary(5, 2, 3, 2, 0.4, 30, 7, False, 1),
        adaptive=JudgedAdaptiveSummary(10.0, 16, 2, 2, 1, 12, 100, 0.5, 1, 3, 2, 1),
    )
    theirs = rollouts(
        dynamic=DynamicSummary(8, 2, 6, 2, 0.25, 50, 0, True, 0),
        adaptive=JudgedAdaptiveSummary(6.0, 24, 1, 1, 0, 4, 20, 0.25, 0, 0, 1, 0),
    )
    sent = {}

    def record(x):
        sent[x.shape] = x
        return torch.stack([x, x])

    step_metrics(batch(), theirs, UPDATE, (5.0, 1.0), Ranks(2, 1, record), 1e-4, {}, 3, "correct")
    ranks = Ranks(2, 0, lambda x: torch.stack([x, sent[x.shape]]))
    m = step_metrics(batch(), mine, UPDATE, (3.0, 2.0), ranks, 1e-4, {}, 3, "correct")
    found = {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("dynamic/")}
    assert found == {
        "prompts_drawn": 13.0, "groups_kept": 4.0, "groups_dropped": 9.0, "groups_trained": 4.0,
        "informative_rate": 4 / 13, "dropped_tokens": 80.0, "wasted_tokens": 7.0,
        "capped": 0.5,  # the share of capped ranks
        "cancelled_sequences": 1.0,
    }  # fmt: skip
    grew = {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("adaptive/")}
    assert grew == {
        "samples_per_prompt_mean": 8.0, "samples_per_prompt_max": 24.0, "budget_used": 0.375,  # mean, max, mean
        "groups_stalled": 3.0, "groups_extended": 3.0, "groups_rescued": 1.0, "extension_samples": 16.0,
        "extension_tokens": 120.0, "cancelled_samples": 1.0, "cancelled_tokens": 3.0,
        "prompts_without_right_at_g": 3.0, "right_answers_found": 1.0,  # the judge's, summed as counts
    }  # fmt: skip
    assert list(grew) == sorted(grew) and list(found) == sorted(found)  # logged in name order, as before
    plain = step_metrics(batch(), rollouts(), UPDATE, (1.0, 1.0), Ranks(), 1e-4, {}, 3, None)
    assert not any(k.startswith(("dynamic/", "adaptive/")) for k in plain)  # nothing found: nothing logged


def tool_rollouts(completions=4, tools=None):
    """This rank's rollout of ``completions`` completions with tools: the engine's tool summary on it."""
    return Rollouts([[1]], completions, [[2]] * completions, [torch.zeros(1)] * completions, ["stop"] * completions,
                    stats=dict(STATS), tools=tools)  # fmt: skip


TOOLS = {
    "samples": 4,
    "calls": 6,
    "failures": 2,
    "timeouts": 1,
    "rounds": 4,
    "wait_s": 1.5,
    "dropped": 2,
    "steps_while_waiting": 12,
}


def test_tool_metrics_are_trls_frequencies_and_ours_only_with_tools():
    m = step_metrics(batch(), tool_rollouts(tools=ToolSummary(**TOOLS)), UPDATE, (3.0, 2.0), Ranks(), 1e-4, {}, 3, None)
    tools = {k: v for k, v in m.items() if k.startswith("tools/")}
    assert tools == {
        "tools/call_frequency": 6 / 4, "tools/failure_frequency": 2 / 6, "tools/turns_mean": 1 + 4 / 4,
        "tools/timeouts": 1.0, "tools/wait_s": 1.5, "tools/dropped": 2.0, "tools/steps_while_waiting": 12.0,
    }  # fmt: skip
    none = ToolSummary(**{**TOOLS, "calls": 0, "failures": 0, "timeouts": 0, "rounds": 0, "wait_s": 0.0})
    m = step_metrics(batch(), tool_rollouts(tools=none), UPDATE, (3.0, 2.0), Ranks(), 1e-4, {}, 3, None)
    assert m["tools/failure_frequency"] == 0.0 and m["tools/call_frequency"] == 0.0  # TRL: 0 without calls
    plain = step_metrics(batch(), rollouts(), UPDATE, (1.0, 1.0), Ranks(), 1e-4, {}, 3, None)
    assert not any(k.startswith("tools/") for k in plain)


def test_tool_metrics_are_reduced_over_ranks():
    # rank 0 of 2; the other rank ran 2 samples with 4 calls, 1 failure, 3 rounds, 0.5 s waiting, 30 steps
    theirs = ToolSummary(
        samples=2, calls=4, failures=1, timeouts=0, rounds=3, wait_s=0.5, dropped=1, steps_while_waiting=30
    )
    sent = {}

    def record(x):
        sent[x.shape] = x
        return torch.stack([x, x])

    step_metrics(batch(), tool_rollouts(2, theirs), UPDATE, (5.0, 1.0), Ranks(2, 1, record), 1e-4, {}, 3, None)
    ranks = Ranks(2, 0, lambda x: torch.stack([x, sent[x.shape]]))
    m = step_metrics(batch(), tool_rollouts(tools=ToolSummary(**TOOLS)), UPDATE, (3.0, 2.0), ranks, 1e-4, {}, 3, None)
    assert m["tools/call_frequency"] == pytest.approx(10 / 6)  # every rank's calls over every rank's samples
    assert m["tools/failure_frequency"] == pytest.approx(3 / 10)
    assert m["tools/turns_mean"] == pytest.approx(1 + 7 / 6)
    assert m["tools/wait_s"] == pytest.approx(2.0) and m["tools/steps_while_waiting"] == 30.0  # summed; the largest
    assert m["tools/dropped"] == 3.0
