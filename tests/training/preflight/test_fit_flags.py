"""Lightning flags, data settings and TRL names that a GRPO run cannot use (issue #45, items 4 and 6), fed through
``python -m infgrpo.fit``: each stops before the model loads with one ``error:`` line naming the setting and ours
that does the job, or warns once (``[infgrpo]``) for a setting that would do nothing."""

import json
import warnings

import pytest

from infgrpo.settings import ConfigError
from infgrpo.training.preflight.trainer_check import check_graph_device, runs_on_cuda, world_size
from tests.helpers import Loaded, refuse_model_load
from tests.test_fit import ROOT, cli_error
from tests.training.preflight.test_fit_bad_input import data_folder, own_data

TINY = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--trainer.max_steps", "1"]


@pytest.fixture(autouse=True)
def no_model_load(monkeypatch, tmp_path):
    """Each case must stop (or warn) before the model loads; a run that gets there raises :class:`Loaded`."""
    refuse_model_load(monkeypatch, tmp_path)


def jsonl(folder, prompts):
    return data_folder(folder, "".join(json.dumps({"prompt": p}) + "\n" for p in prompts))


def warnings_of(*args):
    """The ``[infgrpo]`` warnings of a run that passes every check (stopped where the model loads)."""
    from infgrpo.fit import main

    with warnings.catch_warnings(record=True) as caught, pytest.raises(Loaded):
        warnings.simplefilter("default")
        main(list(args))
    return [str(w.message) for w in caught if str(w.message).startswith("[infgrpo]")]


DDP = "trainer.strategy: ddp"
FSDP2 = "trainer.strategy: fsdp2"
MODEL_PARALLEL = ["--trainer.strategy", "lightning.pytorch.strategies.ModelParallelStrategy"]


@pytest.mark.parametrize(
    "flags,named,ours",
    [
        (["--trainer.strategy", "ddp_spawn", "--trainer.devices", "2"], "strategy='ddp_spawn' is not supported", DDP),
        (["--trainer.strategy", "fsdp"], "trainer.strategy='fsdp' is not supported", FSDP2),
        (["--trainer.strategy", "fsdp_cpu_offload"], "trainer.strategy='fsdp_cpu_offload' is not supported", FSDP2),
        (["--trainer.strategy", "deepspeed_stage_3"], "trainer.strategy='deepspeed_stage_3' is not supported", FSDP2),
        (
            ["--trainer.strategy", "lightning.pytorch.strategies.FSDPStrategy"],
            "trainer.strategy='lightning.pytorch.strategies.FSDPStrategy' is not supported",
            FSDP2,
        ),
        (
            [*MODEL_PARALLEL, "--trainer.strategy.data_parallel_size=1", "--trainer.strategy.tensor_parallel_size=2"],
            "trainer.strategy.init_args.tensor_parallel_size=2 is not supported: infgrpo shards data parallel only",
            FSDP2,
        ),
        (
            [*MODEL_PARALLEL, "--trainer.strategy.tensor_parallel_size=1"],
            "trainer.strategy.init_args.data_parallel_size='auto' is one rank per node",
            FSDP2,
        ),
        (
            ["--trainer.strategy", "fsdp2", "--model.lora.r", "8", "--model.quantization.load_in_4bit", "true"],
            "model.quantization.load_in_4bit=true is not supported with trainer.strategy='fsdp2'",
            "4-bit weights with trainer.strategy: ddp",
        ),
        (
            ["--trainer.strategy", "fsdp2", "--model.sampler.cuda_graphs", "on"],
            "model.sampler.cuda_graphs='on' is not supported with trainer.strategy='fsdp2'",
            "use 'auto' (no graphs when sharded) or 'off'",
        ),
        (
            ["--trainer.strategy", "lightning.pytorch.strategies.DDPStrategy", "--trainer.strategy.start_method=spawn"],
            "trainer.strategy='DDPStrategy(spawn)' is not supported",
            DDP,
        ),
        (
            ["--trainer.accumulate_grad_batches", "4"],
            "trainer.accumulate_grad_batches=4 is not supported",
            "data.batch_size",
        ),
        (["--trainer.gradient_clip_val", "0.5"], "trainer.gradient_clip_val=0.5 is not supported", "max_grad_norm 0.5"),
        (["--ckpt_path", "best"], "--ckpt_path='best' is the best checkpoint of a ModelCheckpoint", "--ckpt_path last"),
        (["--trainer.strategy", "fsdp3"], "trainer.strategy='fsdp3' is no strategy name: infgrpo trains", "fsdp2"),
        (
            ["--trainer.accelerator", "cpu", "--model.sampler.cuda_graphs", "on"],
            "model.sampler.cuda_graphs='on' needs a CUDA device, and ",
            "use 'auto' (graphs on CUDA, none elsewhere) or 'off'",
        ),
        (
            ["--model.policy.dtype", "float16"],
            "model.policy.dtype='float16' with lora.r=0 (full fine-tuning) cannot train: ",
            "use bfloat16 or float32 weights, or LoRA",
        ),
    ],
)
def test_lightning_flags_the_module_cannot_take_name_ours(capsys, flags, named, ours):
    line = cli_error(capsys, *TINY, *flags)
    assert named in line and ours in line


def test_an_unknown_strategy_names_only_what_infgrpo_takes(capsys):
    line = cli_error(capsys, *TINY, "--trainer.strategy", "fsdp3")
    assert "ddp_spawn" not in line and "deepspeed" not in line  # Lightning's list offers both; infgrpo refuses them


def test_float16_weights_under_lora_and_a_strategys_class_path_pass_the_checks():
    assert warnings_of(*TINY, "--model.policy.dtype", "float16", "--model.lora.r", "8") == []
    assert warnings_of(*TINY, "--trainer.strategy", "lightning.pytorch.strategies.DDPStrategy") == []


def test_cuda_graphs_on_needs_the_run_on_cuda():
    check_graph_device("on", True, "")
    check_graph_device("auto", False, "")
    assert runs_on_cuda("auto", True) and runs_on_cuda(None, True) and runs_on_cuda("gpu", True)
    assert not runs_on_cuda("cpu", True) and not runs_on_cuda("mps", True) and not runs_on_cuda("auto", False)
    with pytest.raises(ConfigError, match=r"^model.sampler.cuda_graphs='on' needs a CUDA device, and it runs on cpu"):
        check_graph_device("on", False, "it runs on cpu")


def test_sharded_strategies_pass_the_checks():
    """``fsdp2`` by name, and Lightning's ModelParallelStrategy with one data-parallel mesh, reach the model load."""
    assert warnings_of(*TINY, "--trainer.strategy", "fsdp2", "--trainer.devices", "2") == []
    sizes = ["--trainer.strategy.data_parallel_size=2", "--trainer.strategy.tensor_parallel_size=1"]
    assert warnings_of(*TINY, *MODEL_PARALLEL, *sizes, "--trainer.devices", "2") == []


def test_a_distributed_checkpoint_resumes_only_sharded(capsys, tmp_path):
    """A folder of shards with Lightning's meta.pt is one checkpoint: read for the checks, refused without fsdp2."""
    import torch

    folder = tmp_path / "last.ckpt"
    folder.mkdir()
    torch.save({"global_step": 1, "epoch": 0}, folder / "meta.pt")
    line = cli_error(capsys, *TINY, "--trainer.max_steps", "3", "--ckpt_path", str(folder))
    assert f"--ckpt_path={str(folder)!r} is a distributed checkpoint (a folder of shards" in line
    assert "resume it with trainer.strategy: infgrpo.FSDP2Strategy (or fsdp2)" in line
    line = cli_error(capsys, *TINY, "--ckpt_path", str(folder), "--trainer.strategy", "fsdp2")  # read: step 1 of 1
    assert "the checkpoint is at step 1 and trainer.max_steps=1: nothing to train" in line


def test_no_clipping_and_no_accumulation_pass():
    assert warnings_of(*TINY, "--trainer.gradient_clip_val", "0", "--trainer.accumulate_grad_batches", "1") == []


def test_world_size_counts_devices_and_nodes():
    assert world_size({"accelerator": "cpu", "devices": 2, "num_nodes": 3}) == 6
    assert world_size({"accelerator": "cpu", "devices": "0,1"}) == 2
    assert world_size({"accelerator": "cpu", "devices": [0, 1, 2]}) == 3
    assert world_size({"accelerator": "cpu", "devices": "auto"}) == 1


def test_train_size_below_one_batch_is_named(capsys):
    line = cli_error(capsys, *TINY, "--data.train_size", "3")
    assert "data.train_size=3 is fewer prompts than one batch (data.batch_size=8 x 1 rank = 8 prompts a step)" in line
    assert "lower data.batch_size to <= 3" in line


def test_a_local_file_below_one_global_batch_counts_the_ranks(capsys, tmp_path):
    folder = jsonl(tmp_path, [f"rev a{c}" for c in "bcdef"])
    ranks = ["--trainer.strategy", "ddp", "--trainer.devices", "2", "--data.batch_size", "4"]
    line = cli_error(capsys, *TINY, *own_data(folder), *ranks)
    assert f"data.path={str(folder)!r} has 5 training rows, fewer than one batch" in line
    assert "(data.batch_size=4 x 2 ranks = 8 prompts a step): give more rows, or lower data.batch_size to <= 2" in line


def test_a_system_prompt_without_the_chat_template_is_named(capsys):
    line = cli_error(capsys, *TINY, "--data.system_prompt", "Be brief.", "--data.chat_template", "false")
    assert "data.system_prompt='Be brief.' is set but data.chat_template is false" in line


def test_long_prompts_skip_that_leaves_too_few_prompts_is_named(capsys, tmp_path):
    long = "rev " + "ab" * 30
    every = jsonl(tmp_path, [long] * 3)
    skip = ["--data.long_prompts", "skip", "--data.max_prompt_length", "30", "--data.batch_size", "2"]
    line = cli_error(capsys, *TINY, *own_data(every), *skip)
    assert "data.long_prompts='skip' with data.max_prompt_length=30 drops every training prompt: all 3" in line
    some = data_folder(tmp_path, "".join(json.dumps({"prompt": p}) + "\n" for p in ["rev ab", long, long]), "some")
    line = cli_error(capsys, *TINY, *own_data(some), *skip)
    assert "keeps 1 of the 3 training prompts, fewer than one batch (data.batch_size=2 x 1 rank" in line


def test_long_prompts_skip_dropping_all_first_rows_measures_the_rest(tmp_path):
    """The first 64 rows are all too long: every row is measured, and the 6 short ones after them train (issue 60:
    a warning here used to precede a run with no prompt at all; tests/training/preflight/test_new_user_input.py)."""
    rows = [f"rev {'ab' * 20}" for _ in range(64)] + ["rev ab"] * 6
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in rows))
    data = ["--data.path", str(tmp_path / "train.jsonl"), "--data.batch_size", "2"]
    assert warnings_of(*TINY, *data, "--data.long_prompts", "skip", "--data.max_prompt_length", "20") == []


def test_settings_that_do_nothing_warn_once_each():
    found = warnings_of(
        *TINY, "--model.adaptive_groups.extend_by", "4", "--data.config_name", "main",
        "--model.rewards.functions", "{synthetic: 1.0, format: 0.0}",
    )  # fmt: skip
    assert len(found) == 3, found
    assert "model.adaptive_groups.extend_by=4 is ignored: model.adaptive_groups.enabled is false" in found[0]
    assert "model.rewards.functions['format']=0 adds nothing to the reward" in found[1]
    assert "data.config_name='main' is ignored: data.path='tiny' is local data" in found[2]


@pytest.mark.parametrize(
    "flags,named",
    [
        (["--model.num_generations", "8"], "model.num_generations is TRL's num_generations; infgrpo's key is "
         "model.group_size"),
        (["--num_generations=8"], "num_generations is TRL's num_generations; infgrpo's key is model.group_size"),
        (["--model.max_completion_length", "64"], "infgrpo's key is model.sampler.max_new_tokens"),
        (["--model.sampler.max_completion_length", "64"], "infgrpo's key is model.sampler.max_new_tokens"),
        (["--trainer.gradient_accumulation_steps", "4"], "infgrpo's key is data.batch_size (data.batch_size counts"),
        (["--model.use_vllm", "true"], "model.use_vllm is TRL's use_vllm, which has no infgrpo key: vLLM serving"),
    ],
)  # fmt: skip
def test_trl_names_on_the_command_line_point_to_ours(capsys, flags, named):
    assert named in cli_error(capsys, *TINY, *flags)


def test_trl_names_in_a_config_file_point_to_ours(capsys, tmp_path):
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text("model:\n  num_generations: 4\n  sampler:\n    max_completion_length: 32\n")
    line = cli_error(capsys, *TINY, "--config", str(mixed))
    assert f"model.num_generations is TRL's num_generations; infgrpo's key is model.group_size (in {mixed})" in line
    assert "model.sampler.max_completion_length is TRL's max_completion_length" in line
    trl = tmp_path / "trl.yaml"
    trl.write_text("num_generations: 4\nlearning_rate: 1.0e-5\nuse_vllm: false\n")
    line = cli_error(capsys, *TINY, "--config", str(trl))
    assert "learning_rate is TRL's learning_rate; infgrpo's key is model.optimizer.learning_rate" in line
    assert f"{trl} looks like a TRL config: convert it with python -m infgrpo.from_trl {trl} -o infgrpo.yaml" in line


def test_a_flat_key_of_0_1_that_trl_shares_keeps_its_0_1_message(capsys):
    line = cli_error(capsys, *TINY, "--model.learning_rate", "1e-5")
    assert "model.learning_rate (--model.learning_rate) is model.optimizer.learning_rate now" in line
