"""The multi-turn rollout against TRL 1.16's own tool loop: greedy decoding of the shipped tool-calling tiny model, in
float64, gives TRL's prompt ids, completion ids, tool masks and message completions (``GRPOTrainer._generate``)."""

import tempfile

import pytest

from infgrpo.agent import AgentConfig
from infgrpo.assets.calculator import add, make_split
from infgrpo.policy.load import load_policy, load_tokenizer
from infgrpo.sampler import MicroGroupSampler, SamplerConfig
from infgrpo.training.agent_rollout import AgentRollout

trl = pytest.importorskip("trl")


def trl_tool_loop(model, prompts: list, max_new_tokens: int, max_turns: int) -> tuple:
    """TRL 1.16's generation with ``tools=[add]``, greedy: (prompt ids, completion ids, tool masks, completions)."""
    from datasets import Dataset

    tokenizer = load_tokenizer("tiny-tools")  # its own template renders tools; it ships a response template
    args = trl.GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=2, num_generations=2, report_to=[], use_cpu=True,
        max_completion_length=max_new_tokens, max_tool_calling_iterations=max_turns,
        generation_kwargs={"do_sample": False},
    )  # fmt: skip
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
        train_dataset=Dataset.from_list([{"prompt": prompts[0]}] * 2), processing_class=tokenizer, tools=[add],
    )  # fmt: skip
    trainer._sync_tool_dicts = [{"add": add} for _ in prompts]  # what _generate_and_score_completions sets first
    trainer._async_tool_dicts = [{} for _ in prompts]
    prompt_ids, completion_ids, tool_mask, completions, *_ = trainer._generate(prompts)
    return prompt_ids, completion_ids, tool_mask, completions


@pytest.mark.parametrize("slots", [1, 3])
def test_greedy_tool_rollouts_equal_trl_1_16_s_tool_loop(slots):
    model = load_policy("tiny-tools", dtype="float64").eval()
    tokenizer = load_tokenizer("tiny-tools")
    agent = AgentRollout(AgentConfig(tools=["infgrpo.assets.calculator:add"], max_turns=2), tokenizer)
    rows = make_split(12, seed=5, split="eval")
    items = [{"prompt": row["prompt"], "meta": row} for row in rows]
    sampler = MicroGroupSampler(model, tokenizer, SamplerConfig(num_slots=slots, max_new_tokens=160, temperature=0.0))
    rollouts, exchanges = agent.decode(sampler, items, 1, seed=0)
    agent.close()

    prompt_ids, completion_ids, tool_mask, completions = trl_tool_loop(model, [r["prompt"] for r in rows], 160, 2)
    assert agent.prompt_ids(items) == [list(p) for p in prompt_ids]
    assert [list(c) for c in rollouts.completion_ids] == [list(c) for c in completion_ids]
    masks = rollouts.tool_masks or [[1] * len(c) for c in rollouts.completion_ids]
    assert masks == [list(m) for m in tool_mask]
    assert exchanges == completions
    called = [e for e in exchanges if any(m["role"] == "tool" for m in e)]
    assert 2 <= len(called) < len(rows)  # the model really calls its tool, on some prompts and not all
    assert all(e[-1]["content"] == str(sum(map(int, r["prompt"][0]["content"][:-1].split("+")))) for e, r in
               zip(exchanges, rows, strict=True) if e in called)  # fmt: skip
