"""The final step is in ``last.ckpt`` whatever the ModelCheckpoint's schedule (issue #60, item 3): a real Trainer and
real ModelCheckpoints over a one-weight module with manual optimization (as GRPOModule), each file read back."""

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader

from infgrpo.callbacks.final_checkpoint import FinalCheckpoint, final_line, no_checkpoint_note


class OneWeight(L.LightningModule):
    """One weight, one SGD step per batch (manual optimization), a held-out metric to evaluate."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward((self.w - 1).pow(2).sum())
        opt.step()

    def validation_step(self, batch, batch_idx):
        self.log("val", self.w.detach().sum())

    def configure_optimizers(self):
        return torch.optim.SGD([self.w], lr=0.1)

    def train_dataloader(self):
        return DataLoader(list(range(1000)), batch_size=1)

    def val_dataloader(self):
        return DataLoader([0], batch_size=1)


def fit(root, steps, callbacks=(), ckpt_path=None, **flags):
    """A fit of ``steps`` steps with ``callbacks``; FinalCheckpoint is added after the Trainer is built, as
    ``python -m infgrpo.fit`` adds it (Lightning's default ModelCheckpoint stays when none is listed)."""
    trainer = L.Trainer(
        max_steps=steps, callbacks=list(callbacks), default_root_dir=root, logger=False, enable_progress_bar=False,
        enable_model_summary=False, accelerator="cpu", num_sanity_val_steps=0, **flags,
    )  # fmt: skip
    final = FinalCheckpoint()
    trainer.callbacks.append(final)
    module = OneWeight()
    trainer.fit(module, ckpt_path=ckpt_path)
    return final, module


def saved(path):
    """(global step, weight) of the checkpoint file ``path``."""
    state = torch.load(path, weights_only=True)
    return state["global_step"], state["state_dict"]["w"]


def test_the_final_step_is_written_where_the_schedule_left_an_earlier_one(tmp_path):
    # every 4 steps with save_last: Lightning alone keeps step 4 of 6 in last.ckpt
    every = ModelCheckpoint(dirpath=tmp_path / "a", every_n_train_steps=4, save_last=True, save_top_k=-1)
    final, module = fit(tmp_path, 6, [every])
    assert final.path == tmp_path / "a" / "last.ckpt" and final.written and final.step == 6
    assert final.last_model_path == str(final.path) and final.best_model_path == ""  # read as a ModelCheckpoint's
    step, w = saved(final.path)
    assert step == 6 and torch.equal(w, module.w.detach())
    assert saved(tmp_path / "a" / "epoch=0-step=4.ckpt")[0] == 4  # the schedule's own file stays
    # Lightning's default (no callback listed): a checkpoint at each evaluation (steps 2, 4), none at step 5
    final, module = fit(tmp_path / "b", 5, val_check_interval=2)
    folder = tmp_path / "b" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["epoch=0-step=4.ckpt", "last.ckpt"]
    assert final.path == folder / "last.ckpt" and saved(final.path)[0] == 5


def test_a_final_step_the_schedule_saved_is_not_written_twice(tmp_path):
    every = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_last=True, save_top_k=-1)
    final, _ = fit(tmp_path, 6, [every])
    assert final.path == tmp_path / "last.ckpt" and not final.written and saved(final.path)[0] == 6


def test_a_resumed_run_writes_its_own_final_step_and_one_with_nothing_to_train_writes_none(tmp_path):
    first, _ = fit(tmp_path / "a", 3)
    again = ModelCheckpoint(dirpath=tmp_path / "b", every_n_train_steps=50, save_last=True)
    final, module = fit(tmp_path / "b", 5, [again], ckpt_path=first.path)
    step, w = saved(final.path)
    assert final.path == tmp_path / "b" / "last.ckpt" and step == 5 and torch.equal(w, module.w.detach())
    done, _ = fit(tmp_path / "c", 5, ckpt_path=final.path)  # at max_steps already: no step trained
    assert done.path is None and not (tmp_path / "c" / "checkpoints").exists()  # Lightning skips the loop


@pytest.mark.parametrize("enabled", [None, True])
def test_the_lines_say_where_the_final_state_is_or_why_there_is_none(enabled, tmp_path):
    assert no_checkpoint_note({"enable_checkpointing": enabled}, "adapter") is None
    note = no_checkpoint_note({"enable_checkpointing": False}, "adapter")
    assert "trainer.enable_checkpointing is false: this run writes no checkpoint" in note
    assert note.endswith("it keeps model.output_dir (adapter) alone")
    assert no_checkpoint_note({"enable_checkpointing": False}, None).endswith("model.output_dir is unset either")
    line = final_line(7, tmp_path / "last.ckpt", tmp_path / "adapter", "adapter", "")
    assert line == f"[infgrpo] done after step 7: checkpoint {tmp_path / 'last.ckpt'}; the trained adapter in " + str(
        tmp_path / "adapter"
    )
    assert final_line(7, None, None, "model", "why").endswith("step 7: no checkpoint (why)")
