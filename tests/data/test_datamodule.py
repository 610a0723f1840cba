import json

import pytest

from infgrpo.data import PromptDataModule
from infgrpo.data.resumable import ResumableBatchSampler
from infgrpo.policy.load import load_tokenizer
from infgrpo.settings import ConfigError


def test_resumable_sampler_continues_mid_epoch_exactly():
    full = ResumableBatchSampler(20, 3, seed=5)
    straight = [b for _ in range(2) for b in full]  # two epochs
    first = ResumableBatchSampler(20, 3, seed=5)
    seen = []
    for b in first:
        seen.append(b)
        first.mark_consumed()
        if len(seen) == 4:
            break
    resumed = ResumableBatchSampler(20, 3, seed=5)
    resumed.load_state_dict(first.state_dict())
    rest = []
    for _ in range(2):
        for b in resumed:
            rest.append(b)
            resumed.mark_consumed()
    assert seen + rest[: len(straight) - 4] == straight
    assert straight[:6] != straight[6:12]  # epochs are reshuffled


def write_split(folder, name, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_local_jsonl_folder_with_chat_template(tmp_path):
    write_split(tmp_path, "train", [{"question": f"rev ab{i}", "answer": "x"} for i in range(6)])
    dm = PromptDataModule(path=str(tmp_path), prompt_column="question", eval_split=None, batch_size=2)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert len(batch) == 2 and batch[0]["meta"]["answer"] == "x"
    assert batch[0]["prompt_ids"][0] == 1  # <|im_start|>


def test_system_prompt_goes_into_the_chat_template_or_is_an_error_without_one(tmp_path):
    write_split(tmp_path, "train", [{"prompt": "rev ab"}, {"prompt": "dup cd"}])
    plain = PromptDataModule(path=str(tmp_path), eval_split=None, batch_size=1)
    plain.setup("fit")
    system = PromptDataModule(path=str(tmp_path), eval_split=None, batch_size=1, system_prompt="Be brief.")
    system.setup("fit")
    with_system = system.train_items[0]["prompt_ids"]
    assert len(with_system) > len(plain.train_items[0]["prompt_ids"])
    assert "Be brief." in load_tokenizer("tiny").decode(with_system)
    no_template = PromptDataModule(
        path=str(tmp_path), eval_split=None, batch_size=1, system_prompt="Be brief.", chat_template=False
    )
    with pytest.raises(ValueError, match="data.system_prompt='Be brief.' is set but data.chat_template is false"):
        no_template.setup("fit")


def test_long_prompts_are_reported_never_truncated(tmp_path):
    rows = [{"prompt": "rev " + "a" * n} for n in (2, 50, 3, 60)]
    write_split(tmp_path, "train", rows)
    dm = PromptDataModule(path=str(tmp_path), eval_split=None, batch_size=1, max_prompt_length=40)
    with pytest.raises(ValueError, match=r"2 of 4 prompts .* longer than data.max_prompt_length=40 .*row 1"):
        dm.setup("fit")
    dm = PromptDataModule(path=str(tmp_path), eval_split=None, batch_size=1, max_prompt_length=40, long_prompts="skip")
    dm.setup("fit")
    assert len(dm.train_items) == 2
    dm = PromptDataModule(path=str(tmp_path), eval_split=None, batch_size=1, max_prompt_length=4, long_prompts="skip")
    with pytest.raises(ConfigError, match=r"drops every prompt of split 'train': all 4 .*the shortest has \d+"):
        dm.setup("fit")  # the data module's own check, as the command line's


def test_bad_columns_and_files_are_clear_errors(tmp_path):
    write_split(tmp_path, "train", [{"q": "x"}])
    with pytest.raises(ValueError, match="data.prompt_column='prompt' is not a column .* columns: q"):
        PromptDataModule(path=str(tmp_path), eval_split=None, batch_size=1).setup("fit")
    with pytest.raises(ValueError, match="has no file for split 'eval'"):
        PromptDataModule(path=str(tmp_path), batch_size=1, prompt_column="q").setup("fit")


def test_prompt_template_and_answer_column(tmp_path):
    write_split(tmp_path, "train", [{"question": f"What is {i}+1?", "solution": f"#### {i + 1}"} for i in range(4)])
    dm = PromptDataModule(
        path=str(tmp_path),
        eval_split=None,
        batch_size=2,
        prompt_column="question",
        answer_column="solution",
        prompt_template="Q: {question}",
        chat_template=False,
    )
    dm.setup("fit")
    from infgrpo.policy.load import load_tokenizer

    tok = load_tokenizer("tiny")
    assert tok.decode(dm.train_items[0]["prompt_ids"]) == "Q: What is 0+1?"
    assert dm.train_items[0]["meta"]["answer"] == "#### 1"
    bad = PromptDataModule(
        path=str(tmp_path), eval_split=None, batch_size=1, prompt_column="question", prompt_template="{problem}"
    )
    with pytest.raises(ValueError, match="data.prompt_template names column 'problem'"):
        bad.setup("fit")


def consume(sampler: ResumableBatchSampler, n: int) -> list[list[int]]:
    """The next ``n`` batches, each marked consumed as training would."""
    out = []
    for b in sampler:
        out.append(b)
        sampler.mark_consumed()
        if len(out) == n:
            break
    return out


def test_ranks_split_each_global_batch_contiguously_in_global_order():
    one = consume(ResumableBatchSampler(30, 6, seed=3), 5)
    ranks = [consume(ResumableBatchSampler(30, 2, seed=3, num_replicas=3, rank=r), 5) for r in range(3)]
    for step in range(5):
        assert ranks[0][step] + ranks[1][step] + ranks[2][step] == one[step]
    assert len(ResumableBatchSampler(30, 2, num_replicas=3, rank=1)) == 5  # 30 // (2 x 3); the rest is dropped
    with pytest.raises(ValueError, match=r"fewer than one global batch: batch_size=4 x 3 ranks"):
        ResumableBatchSampler(10, 4, num_replicas=3, rank=0)


def test_checkpoint_of_two_ranks_resumes_on_one_and_on_three():
    straight = [i for b in consume(ResumableBatchSampler(40, 4, seed=1), 10) for i in b]  # one epoch
    two = [ResumableBatchSampler(40, 2, seed=1, num_replicas=2, rank=r) for r in range(2)]
    seen = [consume(s, 3) for s in two]  # 3 steps of 2 x 2 prompts
    state = two[0].state_dict()
    assert state == two[1].state_dict() and state["consumed_prompts"] == 12
    one = ResumableBatchSampler(40, 4, seed=1)
    one.load_state_dict(state)
    after_one = [i for b in consume(one, 2) for i in b]
    three = [ResumableBatchSampler(40, 1, seed=1, num_replicas=3, rank=r) for r in range(3)]
    for s in three:
        s.load_state_dict(state)
    after_three = [i for step in zip(*(consume(s, 3) for s in three), strict=True) for b in step for i in b]
    before = [i for step in zip(*seen, strict=True) for b in step for i in b]
    assert before == straight[:12]
    assert after_one == straight[12:20]
    assert after_three == straight[12:21]


def test_checkpoint_written_before_ranks_existed_still_resumes():
    first = ResumableBatchSampler(20, 3, seed=5)
    consume(first, 2)
    resumed = ResumableBatchSampler(20, 3, seed=5)
    resumed.load_state_dict({"epoch": 0, "consumed": 2, "seed": 5})  # the old format: batches consumed
    assert next(iter(resumed)) == list(ResumableBatchSampler(20, 3, seed=5))[2]
