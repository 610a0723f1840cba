"""TRL's names among the parser's keys: only a key the parser would refuse is pointed to infgrpo's."""

from infgrpo.trl.names import is_known, parents, trl_keys

KNOWN = {
    "config", "seed_everything", "ckpt_path", "trainer", "trainer.max_steps", "trainer.callbacks",
    "trainer.callbacks.help", "model", "model.group_size", "model.sampler", "model.sampler.max_new_tokens",
    "model.sampler.temperature", "data", "data.seed", "data.batch_size",
}  # fmt: skip


def test_keys_under_a_leaf_are_known_and_under_a_group_are_not():
    groups = parents(KNOWN)
    assert groups == {"trainer", "model", "model.sampler", "data"}
    assert is_known("trainer.callbacks.init_args.every_n_train_steps", KNOWN, groups)
    assert not is_known("model.num_generations", KNOWN, groups)
    assert not is_known("model.sampler.top_k_x", KNOWN, groups)


def test_trl_names_that_are_also_ours_pass():
    assert trl_keys(["--trainer.max_steps", "5", "--data.seed=3", "--model.sampler.temperature", "0.7"], KNOWN) is None
    assert trl_keys(["--model.unknown_thing", "1"], KNOWN) is None  # not TRL's: the parser's own message


def test_several_trl_names_are_one_line_with_the_rest_counted():
    argv = [
        f"--{name}" for name in ("num_generations", "max_completion_length", "temperature", "beta", "seed", "top_p")
    ]
    line = trl_keys(argv, KNOWN)
    assert line.startswith("num_generations is TRL's num_generations; infgrpo's key is model.group_size; ")
    assert "temperature is TRL's temperature; infgrpo's key is model.sampler.temperature" in line
    assert line.endswith("; and 2 more TRL names")


def test_older_trl_names_point_to_what_they_mean():
    line = trl_keys(["--torch_dtype", "bfloat16", "--max_prompt_length", "512"], KNOWN)
    assert line.startswith("torch_dtype is TRL's older name of dtype; infgrpo's keys are model.policy.dtype, ")
    per_gpu = trl_keys(["--per_gpu_train_batch_size", "8"], KNOWN)
    assert per_gpu.startswith("per_gpu_train_batch_size is TRL's older name of per_device_train_batch_size; infgrpo's")
    assert "data.batch_size counts prompts per rank" in per_gpu
    assert "max_prompt_length is TRL's max_prompt_length; infgrpo's key is data.max_prompt_length" in line
    assert "torch_compile" not in line
