"""Reward models as reward functions: TRL 1.16's scores, in token-budget micro-batches, found by config alone."""

import copy
import shutil
from pathlib import Path

import huggingface_hub
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from infgrpo.rewards.reward_model import RewardModel, is_reward_model
from infgrpo.rewards.reward_scoring import micro_batches, reward_texts, score_texts
from infgrpo.settings import ConfigError
from tests.helpers import random_model

TINY = Path(__file__).resolve().parents[2] / "infgrpo" / "assets" / "tiny-qwen3"  # a causal LM

STANDARD_PROMPTS = ["rev abc", "count 3 9", "dup ab", "1 + 1 ="]
STANDARD_COMPLETIONS = ["cba", "3 4 5 6 7 8 9 and then some more words", "", " 2<|im_end|>"]
CONV_PROMPTS = [
    [{"role": "system", "content": "You reverse strings."}, {"role": "user", "content": "rev abc"}],
    [
        {"role": "system", "content": "Count."},
        {"role": "user", "content": "count 1 3"},
        {"role": "assistant", "content": "1 2 3"},
        {"role": "user", "content": "count 3 9"},
    ],
    [{"role": "user", "content": "dup ab"}],
    [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "?"}],
]
CONV_COMPLETIONS = [
    [{"role": "assistant", "content": "cba"}],
    [{"role": "assistant", "content": "3 4 5 6 7 8 9, counting every number from three up to nine"}],
    [{"role": "assistant", "content": "abab"}],
    [{"role": "assistant", "content": ""}],
]


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    """A seeded tiny Qwen3 reward model (one label) saved with the tiny tokenizer."""
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(TINY)
    model = random_model(
        "qwen3",
        vocab=len(tok),
        num_labels=1,
        max_position_embeddings=512,
        initializer_range=0.2,  # scores of order 1, so a mismatch shows at 1e-6
        pad_token_id=tok.pad_token_id,
    )
    folder = tmp_path_factory.mktemp("rm") / "tiny-rm"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def trl_trainer(rm_dir, tmp_path_factory):
    """A real TRL 1.16 GRPOTrainer (tiny policy, CPU) that loads the reward model from its folder itself."""
    import datasets
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("trl")),
        report_to=[],
        use_cpu=True,
        bf16=False,  # TRL's default (bf16=True) runs the reward model under accelerate's bf16 autocast, CPU too
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=4,
        chat_template_kwargs={"enable_thinking": False},
    )
    return GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(TINY),
        reward_funcs=str(rm_dir),
        args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": ["a", "b"]}),
        processing_class=AutoTokenizer.from_pretrained(TINY),
    )


def close(values):
    """Equal in float32 up to ~10 ulps (1e-6 absolute, or 2e-6 relative for scores ~2): micro-batches of other
    padded shapes sum in another order (one padded batch, as TRL's, gives the same numbers: 0 difference)."""
    return pytest.approx(values, rel=2e-6, abs=1e-6)


def trl_scores(trainer, prompts, completions):
    inputs = [{"prompt": p, "completion": c} for p, c in zip(prompts, completions, strict=True)]
    rewards = trainer._calculate_rewards(inputs, prompts, completions, [[1]] * len(prompts))  # (N, 1)
    return rewards[:, 0].tolist()


@pytest.mark.parametrize(
    "prompts, completions", [(STANDARD_PROMPTS, STANDARD_COMPLETIONS), (CONV_PROMPTS, CONV_COMPLETIONS)]
)
def test_scores_equal_trl_grpo_trainers_own(rm_dir, trl_trainer, prompts, completions):
    assert trl_trainer.reward_func_names == ["tiny-rm"]
    expected = trl_scores(trl_trainer, prompts, completions)
    rm = RewardModel(str(rm_dir), token_budget=48, chat_template_kwargs={"enable_thinking": False})
    texts = reward_texts(prompts, completions, rm.tokenizer, rm.chat_template_kwargs)
    assert len(micro_batches([len(rm.tokenizer(t)["input_ids"]) for t in texts], 48)) > 1  # really micro-batched
    got = rm(prompts, completions, completion_ids=[[1]] * len(prompts), trainer_state=None)
    assert got == close(expected)
    rm.token_budget = 10**9  # one padded batch, as TRL scores: the same numbers
    assert rm(prompts, completions) == pytest.approx(expected, abs=1e-6, rel=0)
    assert len({round(s, 4) for s in got}) == len(got)  # distinct scores: a wrong order would show
    assert rm.__name__ == "tiny-rm"


def test_a_tokenizer_without_pad_token_pads_with_eos_as_trl_does(rm_dir, trl_trainer):
    from trl import GRPOTrainer

    no_pad = AutoTokenizer.from_pretrained(rm_dir)
    no_pad.pad_token = None
    trainer = GRPOTrainer(
        model=trl_trainer.model,
        reward_funcs=str(rm_dir),
        args=trl_trainer.args,
        train_dataset=trl_trainer.train_dataset,
        processing_class=trl_trainer.processing_class,
        reward_processing_classes=copy.deepcopy(no_pad),
    )
    expected = trl_scores(trainer, STANDARD_PROMPTS, STANDARD_COMPLETIONS)  # one row ends in eos = the pad token
    rm = RewardModel(str(rm_dir), tokenizer=no_pad, token_budget=16)
    assert rm.tokenizer.pad_token == rm.tokenizer.eos_token == "<|im_end|>"
    assert rm.model.config.pad_token_id == rm.tokenizer.eos_token_id
    assert rm(STANDARD_PROMPTS, STANDARD_COMPLETIONS) == close(expected)


def test_micro_batching_does_not_change_scores(rm_dir):
    rm = RewardModel(str(rm_dir))
    texts = reward_texts(CONV_PROMPTS * 3, CONV_COMPLETIONS[::-1] * 3, rm.tokenizer)
    one_each = score_texts(rm.model, rm.tokenizer, texts, token_budget=1)
    one_batch = score_texts(rm.model, rm.tokenizer, texts, token_budget=10**9)
    assert one_each == close(one_batch)
    # a conversational completion given as text is the assistant message TRL makes of it
    assert rm(CONV_PROMPTS, [c[0]["content"] for c in CONV_COMPLETIONS]) == rm(CONV_PROMPTS, CONV_COMPLETIONS)


def test_micro_batches_stay_within_the_budget_and_cover_every_row():
    lengths = [5, 30, 7, 7, 12, 1, 0, 9]
    batches = micro_batches(lengths, token_budget=24)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert batches[0] == [1]  # longer than the budget: alone
    assert all(len(b) * max(lengths[i] for i in b) <= 24 for b in batches[1:])
    assert micro_batches(lengths, 10**9) == [sorted(range(8), key=lambda i: -lengths[i])]
    assert micro_batches([], 4) == []


def test_is_reward_model_reads_config_json_only(rm_dir, tmp_path, monkeypatch):
    assert is_reward_model(str(rm_dir))
    assert not is_reward_model(str(TINY))  # a causal LM
    assert not is_reward_model("math")  # a registry name
    assert not is_reward_model("infgrpo.rewards.math:math_reward")  # an import path: not even a valid hub id
    assert not is_reward_model(str(tmp_path / "missing"))
    # a hub id whose files are in the local Hugging Face cache (the layout huggingface_hub writes)
    snapshot = tmp_path / "hub" / "models--org--tiny-rm" / "snapshots" / ("0" * 40)
    shutil.copytree(rm_dir, snapshot)
    (tmp_path / "hub" / "models--org--tiny-rm" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tiny-rm" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert is_reward_model("org/tiny-rm") and not is_reward_model("org/other-rm")
    rm = RewardModel("org/tiny-rm")
    assert rm.__name__ == "tiny-rm"
    from_folder = RewardModel(str(rm_dir))
    assert rm(STANDARD_PROMPTS, STANDARD_COMPLETIONS) == from_folder(STANDARD_PROMPTS, STANDARD_COMPLETIONS)


def test_the_model_is_frozen_and_moves_with_to(rm_dir):
    rm = RewardModel(str(rm_dir), dtype="float32")
    assert not rm.model.training and not any(p.requires_grad for p in rm.model.parameters())
    assert rm.to("cpu", torch.float64) is rm and rm.model.dtype == torch.float64
    assert isinstance(rm(["a"], ["b"])[0], float)


def test_bad_input_gets_a_clear_error(rm_dir):
    with pytest.raises(ValueError, match=r"folder '.*tiny-qwen3'.*\['Qwen3ForCausalLM'\].*ForSequenceClassification"):
        RewardModel(str(TINY))
    with pytest.raises(ValueError, match="token_budget=0 is not valid"):
        RewardModel(str(rm_dir), token_budget=0)
    rm = RewardModel(str(rm_dir))
    with pytest.raises(ValueError, match="token_budget=0 is not valid"):
        score_texts(rm.model, rm.tokenizer, ["a"], token_budget=0)
    with pytest.raises(ValueError, match="2 prompts but 1 completions"):
        rm(["a", "b"], ["c"])
    with pytest.raises(TypeError, match=r"prompts\[1\] is str"):
        rm([CONV_PROMPTS[0], "text"], ["c", "d"])
    with pytest.raises(ValueError, match="dtype='int8' is not valid"):
        RewardModel(str(rm_dir), dtype="int8")


def test_a_reward_model_folder_in_rewards_functions_trains_a_step(rm_dir, tmp_path):
    """The folder named in ``rewards.functions``: not loaded by the settings, scored through TRL's call with the
    rows' prompts, moved to the policy's device when fit starts, its scores logged for the step."""
    import json

    import lightning as L

    from infgrpo import GRPOModule, SamplerConfig
    from infgrpo.data import PromptDataModule
    from infgrpo.rewards import resolve_reward, score_rewards

    name = str(rm_dir)
    rows = [{"prompt": [{"role": "user", "content": f"rev ab{i}"}]} for i in range(4)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    module = GRPOModule(
        group_size=2,
        sampler=SamplerConfig(num_slots=4, max_new_tokens=8),
        rewards={"functions": {name: 1.0}, "accuracy": None},
    )
    data = PromptDataModule(path=str(tmp_path / "train.jsonl"), batch_size=2)
    trainer = L.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)  # fmt: skip
    trainer.fit(module, data)
    rm = resolve_reward(name)
    assert isinstance(rm, RewardModel) and resolve_reward(name) is rm  # loaded once
    record = module.last_step
    prompts = [record.batch[i // 2]["prompt"] for i in range(len(record.scores.texts))]
    want = rm(prompts, [[{"role": "assistant", "content": t}] for t in record.scores.texts])
    assert record.scores.parts[name].tolist() == close(want)
    again = score_rewards({name: 1.0}, record.scores.texts, [it["meta"] for it in record.batch for _ in range(2)])
    assert again.total.tolist() == close(want)  # prompts default to the rows' prompt column


def edited_copy(rm_dir, folder, keep=None, **config):
    """A copy of the reward model ``rm_dir`` in ``folder`` (only the files ``keep``, if given) with ``config``'s
    keys set in its config.json (None: removed)."""
    import json

    shutil.copytree(rm_dir, folder, ignore=None if keep is None else lambda d, names: set(names) - set(keep))
    saved = json.loads((folder / "config.json").read_text())
    saved.update(config)
    (folder / "config.json").write_text(json.dumps({k: v for k, v in saved.items() if v is not None}))
    return str(folder)


def test_an_entry_that_reads_as_a_model_but_is_no_reward_model_says_what_one_must_be(tmp_path):
    from infgrpo.rewards.reward_model import WHAT_IT_IS
    from infgrpo.training.hparams import check_settings

    def refused(name):
        with pytest.raises(ConfigError) as err:
            check_settings(rewards={"functions": {name: 1.0}, "accuracy": None})
        assert str(err.value).endswith(WHAT_IT_IS) and "is not known" not in str(err.value)
        return str(err.value)

    gone = str(tmp_path / "missing-rm")
    assert refused(gone).startswith(f"rewards.functions: {gone!r} is no folder (and no valid hub id); a reward model")
    assert f"rewards.functions: folder {str(TINY)!r} is a Qwen3ForCausalLM model; " in refused(str(TINY))
    assert "'org/uncached-rm' is no folder, and as a hub id its config.json is not in the local Hugging Face cache" in (
        refused("org/uncached-rm")
    )
    with pytest.raises(ConfigError, match="'acuracy' is not known; valid: "):  # a reward's name, misspelt: as before
        check_settings(rewards={"functions": {"acuracy": 1.0}, "accuracy": None})


def test_a_reward_model_that_would_fail_once_loaded_is_named_from_its_files(rm_dir, tmp_path):
    from infgrpo.rewards.reward_model import check_reward_model_files

    check_reward_model_files(str(rm_dir))  # the good one passes
    two = edited_copy(rm_dir, tmp_path / "two", id2label={"0": "NO", "1": "YES"}, label2id=None)
    with pytest.raises(ConfigError, match=r"has a 2-label head \(config.json id2label\); a reward model has one label"):
        check_reward_model_files(two)
    default = edited_copy(rm_dir, tmp_path / "default", id2label=None, label2id=None)
    with pytest.raises(ConfigError, match=r"has a 2-label head \(no id2label: transformers' default\)"):
        check_reward_model_files(default)
    bare = edited_copy(rm_dir, tmp_path / "bare", keep=["config.json", "model.safetensors"])
    with pytest.raises(ConfigError, match=r"has no tokenizer that loads \(.*\); a reward model scores with its own"):
        check_reward_model_files(bare)
    small = edited_copy(rm_dir, tmp_path / "small", vocab_size=50)
    tokens = len(AutoTokenizer.from_pretrained(rm_dir))
    with pytest.raises(ConfigError, match=rf"tokenizer has {tokens} tokens and its config.json vocab_size=50: ids 50"):
        check_reward_model_files(small)


def test_the_command_line_names_a_bad_reward_model_before_anything_loads(rm_dir, tmp_path, capsys, monkeypatch):
    from tests.helpers import refuse_model_load
    from tests.test_fit import ROOT, cli_error

    refuse_model_load(monkeypatch, tmp_path)
    two = edited_copy(rm_dir, tmp_path / "two", id2label={"0": "NO", "1": "YES"}, label2id=None)
    rewards = ["--model.rewards.functions", f'{{"{two}": 1.0}}', "--model.rewards.accuracy", "null"]
    line = cli_error(capsys, "--config", str(ROOT / "configs" / "tiny.yaml"), *rewards)
    assert line.startswith(f"error: model.rewards.functions: reward model: folder {two!r} has a 2-label head")
