"""Settings that fit no model or data (issue #37, "late"), fed through ``python -m infgrpo.fit``: each stops before
the model loads with the parser's one ``error:`` line (exit 2) naming the field, the value and what is valid."""

import json

import pytest

from infgrpo.policy.load import load_tokenizer
from infgrpo.policy.model_config import load_model_config
from infgrpo.rewards.signature import check_reward_call
from infgrpo.settings import ConfigError
from infgrpo.training.preflight.model_data import check_context
from tests.test_fit import ROOT, cli_error
from tests.training.preflight.test_fit_bad_input import data_folder, own_data

TINY = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--trainer.max_steps", "1"]


def positional_only(completions, /):
    return [0.0 for _ in completions]


def needs_prompts(completions, metadata, *, prompts):
    return [0.0 for _ in completions]


def takes_info(completions, metadata, completion_lengths, **info):
    return [0.0 for _ in completions]


@pytest.fixture(autouse=True)
def no_model_load(monkeypatch, tmp_path):
    """A test fails if the model would load: each case must stop before it."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("infgrpo.module.load_policy", refuse)
    monkeypatch.chdir(tmp_path)  # runs/tiny of a run that got through would land here


def test_max_new_tokens_past_the_context_is_named_with_the_context(capsys):
    line = cli_error(capsys, *TINY, "--model.sampler.max_new_tokens", "100000")
    assert "model.sampler.max_new_tokens=100000 does not fit the model's context" in line
    assert "(max_position_embeddings) is 256" in line
    line = cli_error(capsys, *TINY, "--model.sampler.max_new_tokens", "233")  # fits a 23-token prompt, not these
    assert "model.sampler.max_new_tokens=233 does not fit" in line and "of split 'train' has 2" in line


def test_the_context_rule_is_the_samplers_at_its_bounds():
    config = load_model_config("tiny")  # 256 positions
    check_context(config, 255, [])  # a one-token prompt and 255 new tokens fill it exactly
    with pytest.raises(ConfigError, match="a prompt of 1 token; with max_new_tokens=256 it needs 257 positions"):
        check_context(config, 256, [])
    check_context(config, 236, [("train", 3, 20)])
    with pytest.raises(ConfigError, match="row 3 of split 'train' has 20 tokens; .* lower max_new_tokens to <= 236"):
        check_context(config, 237, [("train", 0, 5), ("train", 3, 20)])


def test_a_prompt_too_long_by_itself_names_the_prompt_settings(capsys):
    config = load_model_config("tiny")  # 256 positions
    with pytest.raises(ConfigError) as err:
        check_context(config, 64, [("train", 0, 5), ("train", 3, 300)])
    line = str(err.value)
    assert line.startswith("the prompts are too long for the model: row 3 of split 'train' has 300 tokens; ")
    assert "the prompt alone takes 300 of them, leaving no room for a completion. To fit: set " in line
    assert "data.max_prompt_length: 192 with data.long_prompts: skip" in line and "data.system_prompt" in line
    assert "a model with a longer context" in line and "<=" not in line
    with pytest.raises(ConfigError, match="lower model.sampler.max_new_tokens below 256, then data.max_prompt_length"):
        check_context(config, 300, [("train", 3, 256)])
    recipe = "You are a helpful AI Assistant that provides well-reasoned and detailed responses. " * 4
    line = cli_error(capsys, *TINY, "--data.system_prompt", recipe, "--data.max_prompt_length", "2000")
    assert "the prompts are too long for the model: row " in line and "data.max_prompt_length: 160 with" in line
    assert "model.sampler.max_new_tokens=" not in line and "<= -" not in line


@pytest.mark.parametrize("steps", ["-5", "0"])
def test_max_steps_other_than_minus_one_or_positive_is_refused(capsys, steps):
    line = cli_error(capsys, *TINY, "--trainer.max_steps", steps)
    assert f"trainer.max_steps={steps}" in line and "must be -1 (no limit: max_epochs ends the run) or >= 1" in line


@pytest.mark.parametrize("key", ["dynamic_sampling", "adaptive_groups"])
def test_judged_rollouts_with_a_baseline_decoder_are_refused_alike(capsys, key):
    line = cli_error(capsys, *TINY, f"--model.{key}.enabled", "true", "--model.sampler.decoder", "hf_full")
    assert f"model.{key}.enabled needs sampler.decoder='engine'" in line and "got 'hf_full'" in line


def test_a_data_path_that_is_neither_local_nor_reachable_names_data_path(capsys, tmp_path, monkeypatch):
    missing = tmp_path / "no" / "data"
    line = cli_error(capsys, *TINY, "--data.path", str(missing))
    assert f"data.path={str(missing)!r} is neither a local file/folder" in line
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    line = cli_error(capsys, *TINY, "--data.path", "no-org/no-dataset")
    assert (
        "data.path='no-org/no-dataset' is neither a local file/folder nor a dataset the hub can reach offline" in line
    )


def test_a_cached_hub_dataset_passes_offline(tmp_path, monkeypatch):
    from infgrpo.data.hub_source import check_hub_source

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="no cached copy in"):
        check_hub_source("some-org/some-set")
    (tmp_path / "some-org___some-set").mkdir()
    check_hub_source("some-org/some-set")


def test_a_prompt_column_missing_from_the_first_rows_is_named(capsys, tmp_path):
    line = cli_error(capsys, *TINY, "--data.prompt_column", "question")
    assert "data.prompt_column='question' is not a column of split 'train'; columns: task, prompt, answer" in line
    folder = data_folder(tmp_path, '{"question": "rev ab", "answer": "ba"}\n')
    line = cli_error(capsys, *TINY, *own_data(folder), "--data.prompt_column", "question", "--data.answer_column", "x")
    assert "data.answer_column='x' is not a column of split 'train'; columns: question, answer" in line


def test_a_template_naming_a_missing_column_or_no_column_is_named(capsys):
    line = cli_error(capsys, *TINY, "--data.prompt_template", "Q: {question}")
    assert "data.prompt_template names column 'question' that split 'train' lacks" in line
    line = cli_error(capsys, *TINY, "--data.prompt_template", "Q: {}")
    assert "data.prompt_template='Q: {}' cannot format a row of split 'train' (IndexError" in line


def test_max_prompt_length_below_the_first_prompts_is_named(capsys):
    line = cli_error(capsys, *TINY, "--data.max_prompt_length", "5")
    assert "data.max_prompt_length=5 is below the prompts of split 'train'" in line
    assert "data.long_prompts='error'" in line


def test_lora_target_modules_matching_nothing_list_the_linear_layers(capsys):
    line = cli_error(capsys, *TINY, "--model.lora.r", "8", "--model.lora.target_modules", "[q_projx]")
    assert "model.lora.target_modules=['q_projx'] names no module of the model (Qwen3ForCausalLM)" in line
    assert "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj" in line


@pytest.mark.parametrize("fn", ["positional_only", "needs_prompts"])
def test_a_reward_that_cannot_take_the_call_is_named_at_setup(capsys, fn):
    name = f"{__name__}:{fn}"
    line = cli_error(capsys, *TINY, "--model.rewards.functions", f"{{{name}: 1.0}}", "--model.rewards.accuracy", "null")
    assert f"model.rewards.functions[{name!r}] has the signature" in line
    assert "a reward must accept fn(completions, **kwargs) -> list[float], TRL's convention" in line


def test_rewards_that_take_the_call_pass():
    check_reward_call("takes_info", takes_info)
    check_reward_call("lambda", lambda completions, metadata, **kw: [])
    check_reward_call("trl", lambda completions, solution, **kw: [])  # TRL's: a column by name
    check_reward_call("one", lambda completions: [])  # gets what it names
    with pytest.raises(ConfigError, match="missing a required argument: 'prompts'"):
        check_reward_call("needs_prompts", needs_prompts)


def test_a_trl_reward_needing_a_column_the_data_lacks_is_named_before_loading(capsys):
    name = "trl.rewards:accuracy_reward"
    line = cli_error(capsys, *TINY, "--model.rewards.functions", f"{{{name}: 1.0}}", "--model.rewards.accuracy", "null")
    assert f"reward {name!r} needs the dataset column 'solution'" in line
    assert "columns: task, prompt, answer" in line


def test_a_trl_reward_reading_chat_messages_on_string_prompts_is_named_before_loading(capsys):
    name = "trl.rewards:think_format_reward"  # reads completion[0]["content"]: conversational rows only
    line = cli_error(capsys, *TINY, "--model.rewards.functions", f"{{{name}: 1.0}}", "--model.rewards.accuracy", "null")
    assert f"reward {name!r} reads conversational completions (its completions parameter is " in line
    assert "but the prompts of data.path='tiny' (split 'train') are strings (row 0)" in line


def test_held_out_rows_lacking_a_rewards_column_are_named_before_loading(capsys, tmp_path):
    turn = [{"role": "user", "content": "What is 3+4?"}]
    train = "".join(json.dumps({"prompt": turn, "solution": "7"}) + "\n" for _ in range(8))
    folder = data_folder(tmp_path, train)
    (tmp_path / "eval.jsonl").write_text(json.dumps({"prompt": turn, "answer": "7"}) + "\n")
    name = "trl.rewards:accuracy_reward"
    args = ["--model.rewards.functions", f"{{{name}: 1.0}}", "--model.rewards.accuracy", "null"]
    line = cli_error(capsys, *TINY, *own_data(folder), *args, "--data.eval_path", str(tmp_path / "eval.jsonl"))
    assert f"reward {name!r} needs the dataset column 'solution' (its parameter solution), which " in line
    assert f"data.eval_path={str(tmp_path / 'eval.jsonl')!r} lacks; columns: prompt, answer" in line


def test_malformed_chat_messages_are_named_before_loading(capsys, tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "rev ab"}]}] * 100 + [{"prompt": [{"role": "user"}]}]  # past 64
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = cli_error(capsys, *TINY, "--data.path", str(tmp_path / "train.jsonl"))
    assert "row 100 of split 'train' (data.prompt_column='prompt'): message 0 (user) has no content" in line


def test_first_rows_lengths_use_the_data_modules_encoding():
    from infgrpo.data.datamodule import encode_prompt
    from infgrpo.data.first_rows import check_first_rows, first_rows

    hp = dict(path="tiny", train_split="train", eval_split=None, eval_size=0, train_size=None, prompt_column="prompt",
              answer_column=None, prompt_template=None, system_prompt=None, chat_template=True,
              max_prompt_length=128, long_prompts="error")  # fmt: skip
    tok = load_tokenizer("tiny")
    kept = check_first_rows(hp, lambda: tok)
    rows = first_rows("tiny", "train")
    assert [n for _, _, n in kept] == [len(encode_prompt(tok, r["prompt"], None, True)) for r in rows]
    assert len(kept) == 64


@pytest.mark.parametrize(
    "spec", [["q_proj"], ["self_attn.q_proj", "mlp"], ["proj"], ".*layers\\.0\\..*_proj", "q_proj"]
)
def test_the_target_rule_is_peft_s(spec):
    import torch
    from peft import LoraConfig
    from peft.tuners.tuners_utils import check_target_module_exists
    from transformers import AutoModelForCausalLM

    from infgrpo.policy.lora_targets import targets

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(load_model_config("tiny"))
    config = LoraConfig(r=8, target_modules=spec)
    for name, _ in model.named_modules():
        assert targets(spec, name) == bool(check_target_module_exists(config, name)), name


def test_data_paths_that_look_like_files_are_no_hub_names_but_dotted_names_are(tmp_path, monkeypatch):
    from infgrpo.data.hub_source import check_hub_source

    with pytest.raises(ConfigError, match="nor a hub dataset name"):
        check_hub_source("train.jsonl")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path))
    (tmp_path / "org___set-v1.5").mkdir()
    check_hub_source("org/set-v1.5")  # a dot in a hub name is no file type
