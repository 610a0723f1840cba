"""TRL's dataset formats: conversational prompts render to TRL 1.16's token ids; files and in-memory datasets."""

import json
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
import trl
from trl.trainer.grpo_trainer import GRPOTrainer

from infgrpo.data import PromptDataModule
from infgrpo.data.conversation import encode_prompt, holds_template
from infgrpo.policy.load import load_tokenizer
from infgrpo.settings import ConfigError

SYSTEM = {"role": "system", "content": "Answer with the number only."}
CONVERSATIONS = [
    [{"role": "user", "content": "What is 3+4?"}],
    [SYSTEM, {"role": "user", "content": "rev abc"}],
    [
        SYSTEM,
        {"role": "user", "content": "count 1 3"},
        {"role": "assistant", "content": "1 2 3"},
        {"role": "user", "content": "and count 4 6?"},
    ],
]


def trl_prompt_ids(tokenizer, prompts, chat_template_kwargs=None):
    """Token ids as TRL 1.16's GRPOTrainer tokenizes a batch of prompts (its own method, on a minimal trainer)."""
    trainer = SimpleNamespace(
        _is_vlm=False, environment_factories=None, processing_class=tokenizer, tools=None, chat_template=None,
        chat_template_kwargs=chat_template_kwargs or {},
    )  # fmt: skip
    return GRPOTrainer._tokenize_prompts(trainer, prompts)[0]


@pytest.fixture(scope="module")
def qwen3_tokenizer():
    """The tiny tokenizer with Qwen3's chat template (shipped by TRL): system turns, history, enable_thinking."""
    tok = load_tokenizer("tiny")
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    return tok


def test_conversational_prompts_are_token_identical_to_trl(qwen3_tokenizer):
    tiny = load_tokenizer("tiny")
    for tok in (tiny, qwen3_tokenizer):
        ours = [encode_prompt(tok, c, None, True) for c in CONVERSATIONS]
        assert ours == trl_prompt_ids(tok, CONVERSATIONS)
    for thinking in (True, False):
        kwargs = {"enable_thinking": thinking}
        ours = [encode_prompt(qwen3_tokenizer, c, None, True, kwargs) for c in CONVERSATIONS]
        assert ours == trl_prompt_ids(qwen3_tokenizer, CONVERSATIONS, kwargs)
    off = encode_prompt(qwen3_tokenizer, CONVERSATIONS[0], None, True, {"enable_thinking": False})
    assert qwen3_tokenizer.decode(off).endswith("<think>\n\n</think>\n\n")  # the option reached the template
    assert off != encode_prompt(qwen3_tokenizer, CONVERSATIONS[0], None, True)


def test_a_string_that_holds_the_template_is_not_wrapped_twice(tokenizer):
    text = tokenizer.apply_chat_template(CONVERSATIONS[1], tokenize=False, add_generation_prompt=True)
    assert holds_template(tokenizer, text) and not holds_template(tokenizer, "user: rev abc")
    assert encode_prompt(tokenizer, text, None, True) == encode_prompt(tokenizer, CONVERSATIONS[1], None, True)
    plain = encode_prompt(tokenizer, "rev abc", None, True)  # a plain string is wrapped as one user turn
    assert plain == encode_prompt(tokenizer, [{"role": "user", "content": "rev abc"}], None, True)
    with pytest.raises(ConfigError, match="data.system_prompt=.* already hold the chat template's markup"):
        encode_prompt(tokenizer, text, "Be brief.", True)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def conversational_rows(n):
    return [{"prompt": [{"role": "user", "content": f"rev ab{i}"}], "solution": f"{i}ba"} for i in range(n)]


def test_a_conversational_file_reaches_the_items_with_every_column(tmp_path, tokenizer):
    path = write_jsonl(tmp_path / "train.jsonl", conversational_rows(10))
    dm = PromptDataModule(path=path, batch_size=2, eval_fraction=0.2, seed=0)
    dm.setup("fit")
    assert (len(dm.train_items), len(dm.eval_items)) == (8, 2)
    item = dm.train_items[0]
    assert item["prompt"] == [{"role": "user", "content": item["prompt_text"]}]  # the messages, as the row held them
    assert item["prompt_ids"] == encode_prompt(tokenizer, item["prompt"], None, True)
    assert item["meta"]["solution"].endswith("ba") and "prompt" in item["meta"]
    held = {it["prompt_text"] for it in dm.eval_items}
    assert held.isdisjoint(it["prompt_text"] for it in dm.train_items)
    again = PromptDataModule(path=path, batch_size=2, eval_fraction=0.2, seed=0)
    again.setup("fit")
    assert {it["prompt_text"] for it in again.eval_items} == held  # the same seed holds out the same rows


def test_one_file_with_an_eval_file_or_none(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", conversational_rows(6))
    eval_path = write_jsonl(tmp_path / "test.jsonl", conversational_rows(3))
    dm = PromptDataModule(path=path, eval_path=eval_path, batch_size=2)
    dm.setup("fit")
    assert (len(dm.train_items), len(dm.eval_items)) == (6, 3)
    alone = PromptDataModule(path=path, batch_size=2)  # one file and no held-out rows named: no evaluation
    alone.setup("fit")
    assert (len(alone.train_items), alone.eval_items) == (6, [])
    with pytest.raises(ConfigError, match="data.eval_fraction=0.5 and data.eval_path"):
        PromptDataModule(path=path, eval_path=eval_path, eval_fraction=0.5)
    with pytest.raises(ConfigError, match=r"data.eval_fraction=1.0 must be in \[0, 1\)"):
        PromptDataModule(path=path, eval_fraction=1.0)


def test_in_memory_datasets_as_trl_takes_them():
    rows = conversational_rows(5)
    dm = PromptDataModule(train_dataset=datasets.Dataset.from_list(rows), batch_size=2)
    dm.setup("fit")
    assert [it["meta"]["solution"] for it in dm.train_items] == [r["solution"] for r in rows]
    assert dm.eval_items == [] and "train_dataset" not in dm.hparams  # rows stay out of the hyper-parameters
    both = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows[:3]), "eval": datasets.Dataset.from_list(rows[3:])}
    )
    dm = PromptDataModule(train_dataset=both, batch_size=2)
    dm.setup("fit")
    assert (len(dm.train_items), len(dm.eval_items)) == (3, 2)
    dm = PromptDataModule(
        train_dataset=datasets.Dataset.from_list(rows[:3]), eval_dataset=datasets.Dataset.from_list(rows[3:])
    )
    dm.setup("fit")
    assert (len(dm.train_items), len(dm.eval_items)) == (3, 2)
    with pytest.raises(ConfigError, match="train_dataset is a str; give a datasets.Dataset"):
        PromptDataModule(train_dataset="train.jsonl")


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([], "row 1 of split 'train' \\(data.prompt_column='prompt'\\) is an empty list of messages"),
        ([{"role": "user"}], "row 1 .* message 0 \\(user\\) has no content"),
        ([{"role": "robot", "content": "hi"}], "row 1 .* message 0 has role 'robot'; valid roles: system, user"),
        ([{"role": "user", "content": ["a", "b"]}], "message 0 \\(user\\) has content of type"),
    ],
)
def test_malformed_messages_are_one_error_naming_the_row(tmp_path, prompt, message):
    rows = conversational_rows(3)
    rows[1]["prompt"] = prompt
    dm = PromptDataModule(path=write_jsonl(tmp_path / "train.jsonl", rows))
    with pytest.raises(ConfigError, match=message):
        dm.setup("fit")


def test_conversations_need_the_chat_template(tmp_path):
    dm = PromptDataModule(path=write_jsonl(tmp_path / "train.jsonl", conversational_rows(3)), chat_template=False)
    with pytest.raises(ConfigError, match="data.chat_template is false, but row 0 of split 'train' is a conversation"):
        dm.setup("fit")
    with pytest.raises(ConfigError, match="data.prompt_template is set, but data.prompt_column='prompt' holds chat"):
        PromptDataModule(path=str(tmp_path / "train.jsonl"), prompt_template="{prompt}!").setup("fit")


STRINGS = ["What is 3+4?", "rev abc", "count 1 3\nthen 4 6"]


def test_a_converted_trl_config_gives_trl_s_prompt_tokens_for_both_formats(tmp_path, tokenizer, qwen3_tokenizer):
    from infgrpo.from_trl import convert

    data = convert({"model_name_or_path": "tiny", "dataset_name": "tiny"}).config["data"]
    assert data["chat_template"] == "conversations"  # what the converter writes: TRL's rule
    for tok in (tokenizer, qwen3_tokenizer):
        assert [encode_prompt(tok, p, None, "conversations") for p in STRINGS] == trl_prompt_ids(tok, STRINGS)
        ours = [encode_prompt(tok, c, None, "conversations") for c in CONVERSATIONS]
        assert ours == trl_prompt_ids(tok, CONVERSATIONS)
        assert encode_prompt(tok, STRINGS[1], None, True) != trl_prompt_ids(tok, STRINGS)[1]  # true wraps it
    for rows in ([{"prompt": p} for p in STRINGS], [{"prompt": c} for c in CONVERSATIONS]):  # through the data module
        path = write_jsonl(tmp_path / f"{type(rows[0]['prompt']).__name__}.jsonl", rows)
        dm = PromptDataModule(path=path, eval_split=None, chat_template=data["chat_template"], seed=0)
        dm.setup("fit")
        got = {repr(it["prompt"]): it["prompt_ids"] for it in dm.train_items}
        expected = trl_prompt_ids(tokenizer, [r["prompt"] for r in rows])
        assert [got[repr(r["prompt"])] for r in rows] == expected


def test_conversations_value_has_no_system_message_for_string_prompts(tokenizer):
    system = [{"role": "system", "content": "Be brief."}, *CONVERSATIONS[0]]
    ours = encode_prompt(tokenizer, CONVERSATIONS[0], "Be brief.", "conversations")
    assert ours == encode_prompt(tokenizer, system, None, True)  # a conversation takes data.system_prompt, as with true
    with pytest.raises(ConfigError, match="data.chat_template: conversations tokenizes string prompts as they are"):
        encode_prompt(tokenizer, "rev abc", "Be brief.", "conversations")
    with pytest.raises(ConfigError, match="data.chat_template='yes' must be true or false or 'conversations'"):
        PromptDataModule(chat_template="yes")
