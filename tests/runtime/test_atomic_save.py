"""Atomic writes (:mod:`infgrpo.runtime.atomic_save`): a failed save keeps the previous file whole."""

import pytest
import torch

from infgrpo.runtime.atomic_save import atomic_torch_save


class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("disk full halfway")


def test_failed_save_keeps_the_previous_checkpoint_intact(tmp_path):
    path = tmp_path / "last.ckpt"
    atomic_torch_save({"step": 1, "w": torch.ones(3)}, path)
    with pytest.raises(RuntimeError, match="disk full"):
        atomic_torch_save({"step": 2, "bad": Unpicklable()}, path)
    assert torch.load(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left behind
