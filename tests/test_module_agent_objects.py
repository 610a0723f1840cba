"""The Python API takes what TRL takes (issue #59, item 7): ``GRPOModule(agent={"tools": [add], "environment":
Counter})`` with the function and the class, recorded in checkpoints by import path; an object without one (a local
function) is one line when a checkpoint is loaded without it, and loads when it is passed again."""

import lightning
import pytest
import torch

from infgrpo import GRPOModule
from infgrpo.settings import ConfigError
from tests.agent import toolbox


def module(**agent):
    """A module on the tiny model with ``agent`` (the compact template renders tools)."""
    return GRPOModule(group_size=2, threads=1, agent={**agent, "chat_template": "compact"})


def test_tools_and_environments_as_objects_are_recorded_by_import_path(tmp_path):
    made = module(tools=[toolbox.add, toolbox.mul], environment=toolbox.Counter)
    assert made.hparams["agent"]["tools"] == ["tests.agent.toolbox:add", "tests.agent.toolbox:mul"]
    assert made.hparams["agent"]["environment"] == "tests.agent.toolbox:Counter"
    assert set(made.agent.box.sync) == {"add"} and set(made.agent.box.asynchronous) == {"mul"}
    assert made.agent.envs.factories == {None: toolbox.Counter}

    def local_add(a: int, b: int) -> int:
        """Adds.

        Args:
            a: one
            b: two
        """
        return a + b

    local = module(tools=[local_add])
    recorded = "(no import path) test_tools_and_environments_as_objects_are_recorded_by_import_path.<locals>.local_add"
    assert local.hparams["agent"]["tools"] == [recorded]
    path = tmp_path / "local.ckpt"
    torch.save(
        {
            "state_dict": local.state_dict(), "hyper_parameters": dict(local.hparams),
            "pytorch-lightning_version": lightning.__version__,
        },
        path,
    )  # fmt: skip
    with pytest.raises(ConfigError) as err:
        GRPOModule.load_from_checkpoint(path)
    assert str(err.value) == (
        f"agent.tools: {recorded[len('(no import path) ') :]!r} was given as an object without an import path (a "
        "lambda, a local function or class, a functools.partial), so the checkpoint could not record where it comes "
        "from; pass it again: GRPOModule.load_from_checkpoint(path, agent={...}) takes the agent settings, objects "
        "included"
    )
    again = GRPOModule.load_from_checkpoint(path, agent={"tools": [local_add], "chat_template": "compact"})
    assert again.agent.box.sync == {"local_add": local_add}
