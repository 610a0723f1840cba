"""infgrpo 0.1's flat keys named with their groups everywhere they can be written: every old key of a YAML file in
one line, ``--model.rewards '{synthetic: 1.0}'`` as its YAML form is, ``GRPOModule(learning_rate=...)`` in Python."""

import pytest

from infgrpo import GRPOModule
from infgrpo.training.compat_v01 import old_keys


def test_every_old_key_of_a_yaml_file_is_named_in_one_line(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("model:\n  loss_type: dapo\n  group_size: 4\n  lora_r: 8\n  learning_rate: 1.0e-4\n")
    message = old_keys(["--config", str(old)])
    assert message.startswith(f"3 keys of infgrpo 0.1 in {old}: model.loss_type is model.objective.loss_type, ")
    assert "model.lora_r is model.lora.r, model.learning_rate is model.optimizer.learning_rate now" in message


def test_keys_from_a_file_and_flags_are_named_with_where_each_is():
    message = old_keys(["--model.lora_r", "8", "--model.beta=0.1"])
    assert "model.lora_r (--model.lora_r) is model.lora.r, model.beta (--model.beta) is model.objective.beta" in message


def test_a_rewards_flag_mapping_names_to_weights_says_what_its_yaml_says(tmp_path):
    weights = tmp_path / "weights.yaml"
    weights.write_text("model:\n  rewards: {synthetic: 1.0}\n")
    flag = old_keys(["--model.rewards", "{synthetic: 1.0}"])
    assert flag == old_keys(["--config", str(weights)]).replace(f"in {weights}", "(--model.rewards)")
    assert "they go in model.rewards.functions now" in old_keys(["--model.rewards={synthetic: 1.0}"])
    assert old_keys(["--model.rewards", "{functions: {synthetic: 1.0}}"]) is None  # the group's own fields


def test_flat_python_arguments_are_unknown_keywords():
    """No shim on GRPOModule.__init__ (0.1's flat keywords get Python's own message; the CLI names the groups)."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'learning_rate'"):
        GRPOModule(learning_rate=1e-4)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_setting'"):
        GRPOModule(no_such_setting=1)
