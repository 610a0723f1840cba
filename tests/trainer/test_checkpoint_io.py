"""The trainer's checkpoint IO (:mod:`infgrpo.trainer.checkpoint_io`): atomic locally, Lightning's fsspec writer
elsewhere."""

import pytest
import torch


def test_remote_paths_go_through_fsspec_and_storage_options_are_refused(tmp_path, monkeypatch):
    import fsspec

    from infgrpo.trainer.checkpoint_io import AtomicCheckpointIO

    io = AtomicCheckpointIO()
    monkeypatch.chdir(tmp_path)  # a remote path written as a local one would land here ("memory:/bucket/...")
    io.save_checkpoint({"step": 3}, "memory://bucket/ckpts/last.ckpt")  # an object store, in memory
    with fsspec.open("memory://bucket/ckpts/last.ckpt", "rb") as f:
        assert torch.load(f)["step"] == 3
    assert not any(tmp_path.iterdir())
    io.save_checkpoint({"step": 4}, f"file://{tmp_path}/local.ckpt")
    assert torch.load(tmp_path / "local.ckpt")["step"] == 4
    with pytest.raises(TypeError, match="storage_options"):
        io.save_checkpoint({"step": 5}, tmp_path / "x.ckpt", storage_options={"anon": True})
