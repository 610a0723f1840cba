"""Samples of one row that get different observations (TRL 1.16: one environment instance a rollout, ``reset`` may deal
each its own game), on the shipped tool model: greedy prompts, completions, rewards and advantages equal TRL's own
``GRPOTrainer._generate_and_score_completions``; sampled tokens do not move with the slot count."""

import random
import tempfile
import warnings

import pytest
import torch

from infgrpo.agent import AgentConfig
from infgrpo.algo.advantages import grpo_advantages
from infgrpo.assets.calculator import make_split
from infgrpo.policy.load import load_policy, load_tokenizer
from infgrpo.sampler import MicroGroupSampler, SamplerConfig
from infgrpo.scoring import Scorer
from infgrpo.training.agent_rollout import AgentRollout
from tests.agent import toolbox

trl = pytest.importorskip("trl")

G, MAX_NEW, ROWS = 4, 160, [{"id": 0}, {"id": 1}]
REWARD, ASKED = "tests.training.agent_rewards:called_a_tool", "tests.training.agent_rewards:asked"


@pytest.fixture(scope="module")
def tiny_tools():
    return load_policy("tiny-tools", dtype="float64").eval()


def ours(model, slots: int, temperature: float = 0.0, seed: int = 0):
    """Our rollout of ``ROWS`` x ``G`` with the Dealt environment: (rollouts, agent, items, scores)."""
    tokenizer = load_tokenizer("tiny-tools")
    agent = AgentRollout(AgentConfig(environment="tests.agent.toolbox:Dealt", max_turns=2), tokenizer, G)
    items = [{"prompt": [{"role": "user", "content": ""}], "meta": row} for row in ROWS]
    toolbox.Dealt.rng = random.Random(3)
    config = SamplerConfig(num_slots=slots, max_new_tokens=MAX_NEW, temperature=temperature)
    rollouts, _ = agent.decode(MicroGroupSampler(model, tokenizer, config), items, G, seed=seed)
    scores = Scorer(tokenizer, {REWARD: 1.0, ASKED: 0.5}, "raise", MAX_NEW, sources=agent.sources)(rollouts, items)
    agent.close()
    return rollouts, agent, items, scores


def trls(model):
    """TRL 1.16's ``_generate_and_score_completions`` on the same rows (each repeated G times), greedy: (its outputs,
    its rewards by name)."""
    from datasets import Dataset

    from tests.training.agent_rewards import asked, called_a_tool

    args = trl.GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=len(ROWS) * G, num_generations=G, report_to=[],
        use_cpu=True, max_completion_length=MAX_NEW, max_tool_calling_iterations=2, reward_weights=[1.0, 0.5],
        generation_kwargs={"do_sample": False},
    )  # fmt: skip
    rows = [{"prompt": [{"role": "user", "content": ""}], **row} for row in ROWS]
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=[called_a_tool, asked], args=args, train_dataset=Dataset.from_list(rows),
        processing_class=load_tokenizer("tiny-tools"), environment_factory=toolbox.Dealt,
    )  # fmt: skip
    toolbox.Dealt.rng = random.Random(3)
    model.train()  # TRL's training batch: num_generations a group
    try:
        out = trainer._generate_and_score_completions([row for row in rows for _ in range(G)])
    finally:
        model.eval()
    return out, trainer._logs["rewards"]


def unpadded(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    return [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]


def test_per_sample_observations_give_trls_prompts_completions_rewards_and_advantages(tiny_tools):
    rollouts, agent, _, scores = ours(tiny_tools, slots=3)
    out, trl_rewards = trls(tiny_tools)

    # each sample its own observation; samples of a row dealt the same sum share one prompt
    observations = [agent.envs.observations(i) for i in range(len(ROWS))]
    assert all(len(set(row)) > 1 for row in observations) and any(len(set(row)) < G for row in observations)
    entry_prompts = rollouts.entry_prompts
    assert entry_prompts is not None
    assert entry_prompts == unpadded(out["prompt_ids"], out["prompt_mask"])
    table, _ = rollouts.prompt_table()
    assert len(table) == sum(len(set(row)) for row in observations)  # prefilled: each distinct prompt of a row once
    assert [list(c) for c in rollouts.completion_ids] == unpadded(out["completion_ids"], out["completion_mask"])
    assert rollouts.tool_masks == unpadded(out["tool_mask"], out["completion_mask"])

    assert set(scores.parts) == {REWARD, ASKED, "Dealt"}
    assert scores.parts[ASKED].tolist() == list(trl_rewards["asked"])  # the prompt each sample decoded
    assert scores.parts["Dealt"].tolist() == list(trl_rewards["Dealt"])
    assert scores.parts[REWARD].tolist() == list(trl_rewards["called_a_tool"])
    assert 0 < sum(trl_rewards["Dealt"]) < len(ROWS) * G  # some samples solve their own sum, not all
    advantages = grpo_advantages(scores.total.double(), G)  # per row, whatever prompt each sample decoded
    assert torch.allclose(advantages, out["advantages"].double(), atol=1e-6)


def test_sampled_tokens_with_per_sample_observations_do_not_move_with_the_slot_count(tiny_tools):
    runs = [ours(tiny_tools, slots, temperature=1.0, seed=7)[0] for slots in (1, 3, 8)]
    assert runs[0].entry_prompts is not None
    for other in runs[1:]:
        assert other.entry_prompts == runs[0].entry_prompts
        assert other.completion_ids == runs[0].completion_ids
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(other.logprobs, runs[0].logprobs, strict=True))


def test_an_out_of_memory_retry_resets_the_environments_again_and_replays_the_rollout(tiny_tools):
    """The first attempt runs out of memory (injected: a forward pre-hook raises what CUDA raises, once, after tools
    ran); the retry resets every instance again in the order dealt, so a tool that counts its calls counts the
    retry's only, and the rollout equals one that never ran out."""
    tokenizer = load_tokenizer("tiny-tools")
    items = [{"prompt": row["prompt"], "meta": row} for row in make_split(3, seed=5, split="eval")]

    def decode(limit: int | None):
        agent = AgentRollout(AgentConfig(environment="tests.agent.toolbox:Calculator", max_turns=2), tokenizer, 2)
        forwards, keys = {"n": 0}, [(i, j) for i in range(len(items)) for j in range(2)]

        def hook(module, args, kwargs):
            forwards["n"] += 1
            ran = limit and any(env.calls for env in agent.envs.instances(keys))
            if ran and forwards["n"] < limit:  # once, after some tools ran in the first attempt
                forwards["n"] = limit
                raise torch.OutOfMemoryError("CUDA out of memory (injected)")

        handle = tiny_tools.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            sampler = MicroGroupSampler(tiny_tools, tokenizer, SamplerConfig(num_slots=6, max_new_tokens=MAX_NEW))
            with warnings.catch_warnings(record=True):  # the back-off's warning
                warnings.simplefilter("always")
                rollouts, _ = agent.decode(sampler, items, 2, seed=3)
        finally:
            handle.remove()
            agent.close()
        calls = [x.environment.calls for x in rollouts.exchanges]
        return rollouts, calls

    expected, expected_calls = decode(None)
    got, calls = decode(10**6)
    assert got.stats["oom_retries"] == 1 and expected.stats["oom_retries"] == 0
    assert got.completion_ids == expected.completion_ids
    assert calls == expected_calls and sum(calls) > 0  # without the re-reset, the failed attempt's calls would count
