"""Every feed with tools: dynamic sampling and adaptive groups judge multi-turn groups from their exchanges.

The reference is the plain rollout: sample j of the p-th prompt drawn has the stream (seed, p, j) whatever the feed,
so the plain rollout of that prompt at ``prompt_offset=p`` decodes the same multi-turn samples (float64, the shipped
tool-calling model on the calculator task), and the plain scorer on those exchanges gives the judge's rewards.
"""

import pytest
import torch

from infgrpo.agent import AgentConfig
from infgrpo.data import PromptDataModule
from infgrpo.policy.load import load_policy, load_tokenizer
from infgrpo.runtime.ranks import Ranks
from infgrpo.sampler import MicroGroupSampler, SamplerConfig
from infgrpo.scoring import Scorer
from infgrpo.training.adaptive import AdaptiveGroupsConfig
from infgrpo.training.agent_rollout import AgentRollout
from infgrpo.training.dynamic import DynamicSamplingConfig
from infgrpo.training.judged_rollout import JudgedRollout

G, SEED, CORRECT = 3, 4, "infgrpo.assets.calculator:correct"


@pytest.fixture(scope="module")
def parts():
    """(sampler, tokenizer, data module): tiny-tools in float64, the calculator's training prompts."""
    tok = load_tokenizer("tiny-tools")
    model = load_policy("tiny-tools", dtype="float64").eval()
    sampler = MicroGroupSampler(model, tok, SamplerConfig(num_slots=4, max_new_tokens=160, temperature=1.0))
    data = PromptDataModule(tokenizer="tiny-tools", train_split="calculator-train", eval_split=None, batch_size=2)
    data.setup("fit")
    return sampler, tok, data


def plain(sampler, agent, item, position, group_size=G):
    """The plain multi-turn rollout of ``item`` as the ``position``-th prompt of a rollout."""
    prompts = agent.prompt_ids([item])
    return sampler.sample(prompts, group_size, SEED, prompt_offset=position, turns=agent.turns)


def test_dynamic_sampling_keeps_groups_judged_from_their_exchanges(parts):
    sampler, tok, data = parts
    agent = AgentRollout(AgentConfig(tools=["infgrpo.assets.calculator:add"], max_turns=2), tok, G)
    data.use_tools(agent.schemas, agent.template)  # as GRPOModule.setup does: the pool's width sees the schemas
    scorer = Scorer(tok, {CORRECT: 1.0}, "raise", 160, sources=agent.sources)
    judged = JudgedRollout(DynamicSamplingConfig(enabled=True, max_prompts=6), AdaptiveGroupsConfig(), sampler,
                           scorer, G, CORRECT, agent)  # fmt: skip
    rollouts, scores, items = judged(data.train_items[:2], SEED, data, Ranks())
    found = rollouts.dynamic
    assert found.groups_trained == 2 <= found.groups_kept and found.prompts_drawn > 2  # the judge ran as they ended
    assert rollouts.tools.calls >= 1 and rollouts.tool_masks is not None  # tools ran; counted over every sample
    assert rollouts.tools.samples >= len(rollouts)
    for k, (position, item) in enumerate(zip(rollouts.drawn, items, strict=True)):
        ref = plain(sampler, agent, item, position)
        rows = slice(k * G, (k + 1) * G)
        assert rollouts.completion_ids[rows] == ref.completion_ids
        assert (rollouts.tool_masks or [])[rows] == (ref.tool_masks or [[1] * len(c) for c in ref.completion_ids])
        assert [x.messages for x in rollouts.exchanges[rows]] == [x.messages for x in ref.exchanges]
        assert torch.equal(scores.total[rows], scorer(ref, [item]).total)  # the judge's rewards: the plain scorer's
        if k < found.groups_kept:
            assert scores.total[rows].unique().numel() > 1  # a kept group has a spread
    agent.close()


def test_adaptive_groups_grow_multi_turn_groups_with_their_environments(parts):
    sampler, tok, data = parts
    agent = AgentRollout(AgentConfig(environment="tests.agent.toolbox:Calculator", max_turns=2), tok, G)
    scorer = Scorer(tok, {CORRECT: 1.0}, "raise", 160, sources=agent.sources)
    adaptive = AdaptiveGroupsConfig(enabled=True, max_samples_per_prompt=3 * G, extend_by=G)
    judged = JudgedRollout(DynamicSamplingConfig(), adaptive, sampler, scorer, G, CORRECT, agent)
    batch = data.train_items[2:6]
    rollouts, scores, items = judged(batch, SEED, data, Ranks())
    grew = rollouts.adaptive
    assert grew.groups_extended >= 1 and max(rollouts.sample_ids) >= G  # extensions ran, with tools
    assert set(scores.parts) == {CORRECT, "Calculator"}  # the environment's get_reward: one more source
    for i, item in enumerate(items):
        ids = rollouts.sample_ids[i * G : (i + 1) * G]
        ref = plain(sampler, agent, item, i, group_size=max(ids) + 1)  # every sample up to the last one trained
        ref_scores = scorer(ref, [item])
        for n, j in enumerate(ids):
            row = i * G + n
            assert rollouts.completion_ids[row] == ref.completion_ids[j]
            assert rollouts.exchanges[row].messages == ref.exchanges[j].messages
            assert scores.total[row] == ref_scores.total[j]  # the environment's count included
    agent.close()
