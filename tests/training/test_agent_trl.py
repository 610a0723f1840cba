"""The multi-turn rollout against TRL 1.16's own tool loop: greedy decoding of the shipped tool-calling tiny models, in
float64, gives TRL's prompt ids, completion ids, tool masks and message completions (``GRPOTrainer._generate``): with
the compact template, with Qwen3's stock template (which TRL swaps for its training template, and infgrpo for its own
qwen3.jinja) and with Llama 3.1's (bare JSON calls), each tokenizer given no setting and no response template."""

import tempfile

import pytest

from infgrpo.agent import AgentConfig
from infgrpo.assets.calculator import add, make_split
from infgrpo.policy.load import load_policy, load_tokenizer
from infgrpo.sampler import MicroGroupSampler, SamplerConfig
from infgrpo.settings import InfgrpoWarning
from infgrpo.training.agent_rollout import AgentRollout
from tests.agent.families import stock_template

trl = pytest.importorskip("trl")


def trl_tool_loop(model, prompts: list, max_new_tokens: int, max_turns: int, tokenizer=None) -> tuple:
    """TRL 1.16's generation with ``tools=[add]``, greedy: (prompt ids, completion ids, tool masks, completions)."""
    from datasets import Dataset

    tokenizer = tokenizer or load_tokenizer("tiny-tools")  # its template renders tools; it ships a response template
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


def stock_tokenizer(stem: str):
    """The stock-format model's tokenizer set up as a model of that family ships it: the family's stock template (read
    from trl), its EOS, no response template."""
    tokenizer = load_tokenizer("tiny-stock-tools")
    tokenizer.chat_template = stock_template(stem)
    tokenizer.eos_token = {"qwen3": "<|im_end|>", "llama3_1": "<|eot_id|>"}[stem]
    tokenizer.response_template = None
    return tokenizer


@pytest.mark.parametrize(("stem", "cap"), [("qwen3", 146), ("llama3_1", 80)])
def test_greedy_tool_rollouts_with_a_stock_template_equal_trl_1_16_s(stem, cap):
    """``cap`` (``max_new_tokens``) falls between the two samples' call + result lengths (the shipped model's: Qwen3
    148 and 145, Llama 3.1 82 and 79), so TRL's two length rules both run: a result that would pass the cap is dropped
    and the sample ends with its call; one that fits is appended and the next turn is cut at the cap."""
    model = load_policy("tiny-stock-tools", dtype="float64").eval()
    tokenizer = stock_tokenizer(stem)
    agent = AgentRollout(AgentConfig(tools=["infgrpo.assets.calculator:add"], max_turns=2), tokenizer)
    assert (agent.template is not None) == (stem == "qwen3")  # Qwen3's is swapped, Llama 3.1's kept
    rows = make_split(4, seed=7, split="eval")[2:]
    items = [{"prompt": row["prompt"], "meta": row} for row in rows]
    sampler = MicroGroupSampler(model, tokenizer, SamplerConfig(num_slots=1, max_new_tokens=cap, temperature=0.0))
    with pytest.warns(InfgrpoWarning, match=r"1 tool results were dropped"):  # the first sample's, by design (above)
        rollouts, exchanges = agent.decode(sampler, items, 1, seed=0)
    agent.close()

    prompt_ids, completion_ids, tool_mask, completions = trl_tool_loop(
        model, [r["prompt"] for r in rows], cap, 2, stock_tokenizer(stem)
    )
    assert agent.prompt_ids(items) == [list(p) for p in prompt_ids]
    assert len(prompt_ids[0]) > 600  # the stock prompt: system text and the tool's schema
    assert [list(c) for c in rollouts.completion_ids] == [list(c) for c in completion_ids]
    masks = rollouts.tool_masks or [[1] * len(c) for c in rollouts.completion_ids]
    assert masks == [list(m) for m in tool_mask]
    assert exchanges == completions
    assert all(e[0]["tool_calls"][0]["function"]["name"] == "add" for e in exchanges)  # every first turn calls
    assert [any(m["role"] == "tool" for m in e) for e in exchanges] == [False, True]  # dropped, then appended
