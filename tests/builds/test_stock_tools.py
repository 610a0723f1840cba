"""The stock-format tool model's build (``python -m infgrpo.builds.stock_tools``): its shared-prefix loss and gradients
are the full sequences', and its demonstrations are labelled on the assistant turns of each stock template."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from infgrpo.agent.shipped import shipped_template
from infgrpo.assets.calculator import demonstration, make_split
from infgrpo.builds import stock_tools
from infgrpo.builds.exchanges import decision_offset, labelled_exchange, noisy_demonstrations
from infgrpo.policy.load import load_policy


def test_the_shared_prefix_loss_and_its_gradients_are_the_full_sequences():
    tokenizer = stock_tools.stock_tokenizer()
    model = load_policy("tiny-tools").eval()
    model.config.max_position_embeddings = stock_tools.POSITIONS
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    rows = make_split(2, seed=0)
    for taught in stock_tools.taught_formats()[:1]:  # the rule is the template's: one is enough
        eos = tokenizer.convert_tokens_to_ids(taught.eos)
        prefix = stock_tools.shared_prefix(tokenizer, taught.template)
        assert len(prefix) > 600  # the system prompt and the tool schema
        demos = [(rows[0], demonstration(rows[0]["prompt"])), (rows[1], demonstration(rows[1]["prompt"], "7"))]
        pairs = [labelled_exchange(tokenizer, taught.template, eos, r["prompt"], turns) for r, turns in demos]
        loss = stock_tools.shared_prefix_loss(model, prefix, pairs, tokenizer.pad_token_id)
        width = max(len(ids) for ids, _ in pairs)
        ids = torch.tensor([i + [tokenizer.pad_token_id] * (width - len(i)) for i, _ in pairs])
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in pairs])
        mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in pairs])
        full = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        torch.testing.assert_close(loss, full, rtol=1e-6, atol=0)  # transformers takes the loss in float32
        grads = []
        for value in (loss, full):
            model.zero_grad()
            value.backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for shared, whole in zip(*grads, strict=True):
            torch.testing.assert_close(shared, whole, rtol=1e-4, atol=1e-6)


def test_each_format_is_labelled_on_its_assistant_turns_through_its_end_token():
    tokenizer = stock_tools.stock_tokenizer()
    row = make_split(1, seed=0)[0]
    for taught in stock_tools.taught_formats():
        eos = tokenizer.convert_tokens_to_ids(taught.eos)
        decide_at = decision_offset(tokenizer, taught.template, row["prompt"])
        ids, labels = labelled_exchange(tokenizer, taught.template, eos, row["prompt"], demonstration(row["prompt"]))
        trained = tokenizer.decode([t for t in labels if t != -100])
        a, b = row["prompt"][0]["content"][:-1].split("+")
        if taught.name == "qwen":
            call = f'<tool_call>\n{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'
            assert trained == f"<think>\n\n</think>\n\n{call}<|im_end|><think>\n\n</think>\n\n{row['answer']}<|im_end|>"
            assert decide_at == len(tokenizer("<think>\n\n</think>\n\n")["input_ids"])  # after the empty thought
        else:
            call = f'{{"name": "add", "parameters": {{"a": {a}, "b": {b}}}}}'
            assert trained == f"{call}<|eot_id|>{row['answer']}<|eot_id|>" and decide_at == 0
        ids, undecided = labelled_exchange(
            tokenizer, taught.template, eos, row["prompt"], demonstration(row["prompt"]), False, decide_at
        )
        assert [k for k, (x, y) in enumerate(zip(labels, undecided, strict=True)) if x != y] == [
            labels.index(next(t for t in labels if t != -100)) + decide_at
        ]


def test_noisy_demonstrations_call_in_the_taught_share():
    import random

    rows = make_split(200, seed=0)
    demos = noisy_demonstrations(random.Random(0), rows, 200, p_tool=0.3, tool_share=0.9)
    decided = [len(turns) > 1 for _, turns, decide in demos if decide]
    assert 0.15 < sum(decided) / len(decided) < 0.45


@pytest.mark.slow  # a whole (two-step) build and its measurement
def test_the_build_writes_a_model_that_loads_with_the_wider_context_and_both_end_ids(tmp_path):
    stock_tools.main(["--out", str(tmp_path), "--steps", "2", "--batch-size", "2", "--n-train", "8", "--n-eval", "1"])
    folder = tmp_path / "tiny-qwen3-stock-tools"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert tokenizer.chat_template == shipped_template("qwen3") and len(tokenizer) == model.config.vocab_size
    assert model.config.max_position_embeddings == stock_tools.POSITIONS
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|eot_id|>"])
