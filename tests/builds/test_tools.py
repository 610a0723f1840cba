"""The tool model's build (``python -m infgrpo.builds.tools``) and the model it shipped: demonstrations rendered,
labelled and parsed with the agent room's compact template and call format."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from infgrpo.agent.formats import FORMATS
from infgrpo.agent.shipped import shipped_template
from infgrpo.assets import TINY_DATA_DIR, TINY_TOOLS_MODEL_DIR
from infgrpo.assets.calculator import add, demonstration, parse_tool_call
from infgrpo.builds.exchanges import labelled_exchange, render
from infgrpo.builds.tools import main

# The whole exchange as docs/design/agents-trl-1.16.md section 7 shows the compact template rendering it.
EXCHANGE = (
    "<|im_start|>system\ntools: add(a,b)<|im_end|>\n<|im_start|>user\n12345+67890?<|im_end|>\n"
    '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 12345, "b": 67890}}\n</tool_call>'
    "<|im_end|>\n<|im_start|>user\n<tool_response>\n80235\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n80235<|im_end|>\n"
)
PROMPT = [{"role": "user", "content": "12345+67890?"}]


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(TINY_TOOLS_MODEL_DIR)


@pytest.fixture(scope="module")
def model():
    return AutoModelForCausalLM.from_pretrained(TINY_TOOLS_MODEL_DIR).eval()


def test_a_rendered_demonstration_round_trips_through_the_template(tok):
    assert tok.chat_template == shipped_template("compact")
    turns = demonstration(PROMPT)
    ids, labels = labelled_exchange(tok, None, tok.eos_token_id, PROMPT, turns)
    assert tok.decode(ids) == EXCHANGE
    trained = tok.decode([t for t in labels if t != -100])
    call_text = '<tool_call>\n{"name": "add", "arguments": {"a": 12345, "b": 67890}}\n</tool_call><|im_end|>'
    assert trained == call_text + "80235<|im_end|>"  # the assistant turns only, without the template's newlines
    # the call's turn, read back by the tokenizer's response template and by parse_tool_call
    prompt_ids = render(tok, None, PROMPT, generation_prompt=True)
    call_ids = ids[len(prompt_ids) : ids.index(tok.eos_token_id, len(prompt_ids)) + 1]
    parsed = tok.parse_response(call_ids, prefix=prompt_ids, tools=[add])
    assert parsed["tool_calls"] == [{"type": "function", "function": turns[0]["tool_calls"][0]["function"]}]
    assert parse_tool_call(tok.decode(call_ids)) == {"name": "add", "arguments": {"a": 12345, "b": 67890}}
    assert parse_tool_call("80235<|im_end|>") is None
    assert parse_tool_call('<tool_call>\n{"name": "add", "arguments": {"a": 1\n</tool_call>') is None


def test_shipped_model_greedy_turn_is_a_call_or_a_direct_answer(tok, model):
    prompt_ids = render(tok, None, PROMPT, generation_prompt=True)
    out = model.generate(torch.tensor([prompt_ids]), do_sample=False, max_new_tokens=96)[0, len(prompt_ids) :].tolist()
    assert tok.eos_token_id in out
    text = tok.decode(out[: out.index(tok.eos_token_id) + 1])
    call = parse_tool_call(text)
    if call is not None:
        assert call["name"] == "add" and set(call["arguments"]) == {"a", "b"}
    else:
        assert text.removesuffix("<|im_end|>").isdigit(), text


def test_shipped_model_calls_the_tool_on_some_sampled_prompts_but_not_all(tok, model):
    rows = [json.loads(line) for line in (TINY_DATA_DIR / "calculator-eval.jsonl").read_text().splitlines()][:32]
    prompts = [render(tok, None, r["prompt"], generation_prompt=True) for r in rows]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = (ids != tok.pad_token_id).long()
    torch.manual_seed(0)
    out = model.generate(
        input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=96
    )[:, width:].tolist()
    calls = [
        parse_tool_call(tok.decode(o[: o.index(tok.eos_token_id) + 1] if tok.eos_token_id in o else o)) for o in out
    ]
    rate = sum(c is not None for c in calls) / len(calls)
    assert 0 < rate < 1


def test_build_script_writes_a_loadable_tool_model(tmp_path):
    main(["--out", str(tmp_path), "--steps", "2", "--n-train", "16", "--n-eval", "4", "--batch-size", "2"])
    built = AutoTokenizer.from_pretrained(tmp_path / "tiny-qwen3-tools")
    assert built.chat_template == shipped_template("compact")
    assert built.response_template == FORMATS["qwen"].response_template  # the one parser of Qwen's calls
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "tiny-qwen3-tools").config.vocab_size == len(built)
    assert len((tmp_path / "tiny-data" / "calculator-eval.jsonl").read_text().splitlines()) == 4
