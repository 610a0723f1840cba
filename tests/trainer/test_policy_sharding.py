"""The sharding handle GRPOModule asks (:mod:`infgrpo.trainer.policy_sharding`) where no process group is needed, the
``fsdp2`` name that importing :mod:`infgrpo.trainer` registers, and the ties a sharded output keeps (the 2-rank runs:
tests/test_sharded.py)."""

import torch

from infgrpo.policy.load import load_policy
from infgrpo.trainer.policy_sharding import PolicySharding
from infgrpo.trainer.sharding import tied_names


def test_the_unsharded_handle_does_nothing():
    sharding = PolicySharding()
    assert not sharding.active
    with sharding.rollout(torch.device("cpu")), sharding.update(), sharding.optimizer_step():
        sharding.after_zero_grad()
    sharding.start_evaluation()
    sharding.end_evaluation()
    assert sharding.full_state() is None


def test_importing_the_trainer_room_registers_fsdp2():
    from lightning.pytorch.strategies import StrategyRegistry

    import infgrpo

    assert StrategyRegistry["fsdp2"]["strategy"] is infgrpo.FSDP2Strategy


def test_tied_names_find_the_lm_head_tied_to_the_embeddings():
    assert tied_names(load_policy("tiny", dtype="float64")) == [["model.embed_tokens.weight", "lm_head.weight"]]
    assert tied_names(torch.nn.Linear(2, 2)) == []
