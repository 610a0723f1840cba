"""ToolTurns on real token ids, driven as the engine drives it, against TRL 1.16's own ``_tool_call_loop``."""

import time

import pytest

from infgrpo.agent.calls import ToolWorkers
from infgrpo.agent.chat import render_prompt, tool_suffix_ids
from infgrpo.agent.tools import tool_box, tool_schema
from infgrpo.agent.turns import ToolTurns
from infgrpo.sampler.schedule.sequence import Sequence
from tests.agent import toolbox
from tests.agent.trl_reference import trl_tool_loop

TOOLS = [toolbox.add, toolbox.mul, toolbox.broken]
SCHEMAS = [tool_schema(t, t.__name__) for t in TOOLS]
ADD = '<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 30}}\n</tool_call>'
TWO = ADD + '\n<tool_call>\n{"name": "mul", "arguments": {"a": 6, "b": 7}}\n</tool_call>'
FAIL = 'Try.\n<tool_call>\n{"name": "broken", "arguments": {"x": 1}}\n</tool_call>'
TURNS = [  # per sample: its first turn, then what it "generates" after each tool round
    [ADD, "The sum is 42."],
    [TWO, FAIL, "Done: 42 and 42."],
    ["No tools needed."],
]


@pytest.fixture(scope="module")
def workers():
    """Tool threads and the event loop, shared by the tests of this file."""
    workers = ToolWorkers(2)
    yield workers
    workers.close()


def model_turns(tok):
    """Each sample's turns as the ids a model samples (each ends with the EOS id)."""
    return [[tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in turns] for turns in TURNS]


def prompts(tok, template):
    """Three distinct prompts rendered with the tools."""
    return [render_prompt(tok, [{"role": "user", "content": f"task {i}"}], SCHEMAS, template) for i in range(3)]


def drive(turns, tok, i, prompt, model, max_new_tokens=10**6, max_len=10**6):
    """What the engine does with sample i: offer each turn ended on EOS, append the results (tool mask 0) or roll
    them back (TRL's rule), resume with the next turn cut at max_new_tokens. Returns (ids, tool mask, exchange)."""
    queue = list(model)
    seq = Sequence(prompt_idx=i, sample_idx=0, token_ids=list(queue.pop(0)))
    seq.turn_start, seq.turns = 0, 0
    mask = [1] * len(seq.token_ids)
    while seq.token_ids[-1:] == [tok.eos_token_id]:
        future = turns.turn_ended(seq, prompt)
        if future is None:
            break
        suffix = future.result()
        if len(seq.token_ids) + len(suffix) > max_new_tokens or len(prompt) + len(seq) + len(suffix) >= max_len:
            turns.rolled_back(seq)
            break
        seq.token_ids += suffix
        seq.turns += 1
        seq.turn_start = len(seq.token_ids)
        post = (queue.pop(0) if queue else [])[: max_new_tokens - len(seq.token_ids)]
        seq.token_ids += post
        mask += [0] * len(suffix) + [1] * len(post)
    return seq.token_ids, mask, turns.ended(seq, prompt)


@pytest.mark.parametrize(
    "limits",
    [
        {},
        {"max_tool_calling_iterations": 1},  # sample 1's second calls parsed, never run
        {"max_completion_length": 300},  # sample 1's second results do not fit: rolled back, the calls counted
        {"max_completion_length": 240},  # sample 1's post-tool turn cut at the budget: parsed when it ends
        {"max_completion_length": 118},  # sample 0's results fill the budget exactly: no post turn, none parsed
        {"max_position_embeddings": 279},  # prompt + completion + results == the context: rolled back (>=)
        {"max_position_embeddings": 280},
    ],
)
def test_tool_turns_give_trls_ids_masks_messages_and_counts(tiny, workers, limits):
    tok, template = tiny
    prompt_ids, model = prompts(tok, template), model_turns(tok)
    trl_mask, trl_completions, trl_ids, trl_calls, trl_failures = trl_tool_loop(
        tok, template, TOOLS, prompt_ids, [m[0] for m in model], [m[1:] for m in model], workers.loop, **limits
    )
    box = tool_box(TOOLS, SCHEMAS)
    turns = ToolTurns(tok, [box] * 3, template, None, limits.get("max_tool_calling_iterations"), workers)
    budget = {"max_new_tokens": limits.get("max_completion_length", 10**6)}
    budget["max_len"] = limits.get("max_position_embeddings", 10**6)
    for i in range(3):
        ids, mask, exchange = drive(turns, tok, i, prompt_ids[i], model[i], **budget)
        assert (ids, mask) == (trl_ids[i], trl_mask[i]), i
        assert exchange.messages == trl_completions[i], i
        assert turns.exchange(i, 0) == exchange.messages
    assert (turns.calls, turns.failures, turns.timeouts) == (trl_calls, trl_failures, 0)
    turns.close()
    assert not workers.stopped  # a shared pool outlives the rollout


def test_one_exchange_end_to_end_on_real_ids(tiny):
    tok, template = tiny
    prompt = prompts(tok, template)[0]
    model = model_turns(tok)[1]
    turns = ToolTurns(tok, [tool_box(TOOLS, SCHEMAS)], template, workers=1)
    seq = Sequence(prompt_idx=0, sample_idx=2, token_ids=list(model[0]))
    seq.turn_start, seq.turns = 0, 0
    suffix = turns.turn_ended(seq, prompt).result()
    results = [{"role": "tool", "name": "add", "content": "42"}, {"role": "tool", "name": "mul", "content": "42"}]
    assert suffix == tool_suffix_ids(tok, results, template)  # sync add first, then the async mul
    assert tok.decode(suffix).startswith("\n<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_resp")
    first = turns.exchange(0, 2)
    assert first[0]["tool_calls"][1]["function"] == {"name": "mul", "arguments": {"a": 6, "b": 7}}
    assert first[1:] == results
    seq.token_ids += suffix + model[1]  # resumed: the results, then a turn that calls broken
    seq.turn_start, seq.turns = len(seq.token_ids) - len(model[1]), 1
    turns.turn_ended(seq, prompt).result()
    assert turns.exchange(0, 2)[-1] == {"role": "tool", "name": "broken", "content": "{'error': 'broken on 1'}"}
    turns.rolled_back(seq)  # the engine found them too long
    exchange = turns.exchange(0, 2)
    assert exchange[:3] == first and len(exchange) == 4 and exchange[-1]["content"] == "Try."
    assert exchange[-1]["tool_calls"][0]["function"]["name"] == "broken"  # the unanswered call stays, as in TRL
    assert turns.ended(seq, prompt).messages == exchange  # the rolled-back turn was parsed already: nothing added
    assert (turns.calls, turns.failures) == (3, 1)
    turns.close()
    assert turns.workers.stopped  # its own pool, ended


def test_max_turns_stops_before_running_the_calls(tiny):
    tok, template = tiny
    prompt = prompts(tok, template)[0]
    turns = ToolTurns(tok, [tool_box(TOOLS, SCHEMAS)], template, max_turns=2, workers=1)
    seq = Sequence(prompt_idx=0, sample_idx=0, token_ids=model_turns(tok)[0][0])
    seq.turn_start, seq.turns = 0, 2
    assert turns.turn_ended(seq, prompt) is None
    assert turns.exchange(0, 0)[0]["tool_calls"] and turns.calls == 0
    turns.close()


def test_a_slow_tool_does_not_hold_the_caller(tiny):
    tok, template = tiny

    def slow(x: int) -> int:
        """Sleeps.

        Args:
            x: returned
        """
        time.sleep(0.3)
        return x

    box = tool_box([slow], [tool_schema(slow, "slow")])
    prompt = render_prompt(tok, [{"role": "user", "content": "s"}], box.schemas, template)
    turns = ToolTurns(tok, lambda i, j: box, template, workers=4)
    ids = tok('<tool_call>\n{"name": "slow", "arguments": {"x": 7}}\n</tool_call>', add_special_tokens=False)
    futures = []
    start = time.perf_counter()
    for j in range(4):
        seq = Sequence(prompt_idx=0, sample_idx=j, token_ids=ids["input_ids"] + [tok.eos_token_id])
        seq.turn_start, seq.turns = 0, 0
        futures.append(turns.turn_ended(seq, prompt))
    assert time.perf_counter() - start < 0.25  # all four handed off at once
    assert all(f.result() == futures[0].result() for f in futures)
    assert time.perf_counter() - start < 1.0  # side by side on four workers, not 1.2 s in a row
    turns.close()
