"""A signal's stop in one process, without a signal (the signal is set on the callback; tests/test_interruption.py
sends real ones): one ``last.ckpt`` that the stop line and ``--ckpt_path last`` both name, and ``model.output_dir``
written before the held-out evaluation that Lightning runs on a stop."""

import signal

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.callbacks.interruption import Interruption
from infgrpo.data import PromptDataModule
from infgrpo.training.preflight.checkpoints import find_last_checkpoint


class SeeOutput(L.Callback):
    """Notes whether ``output_dir`` held the model when the held-out evaluation began."""

    def __init__(self, folder):
        self.folder, self.written = folder, None

    def on_validation_start(self, trainer, module):
        if trainer.sanity_checking:
            return
        self.written = (self.folder / "model.safetensors").is_file()


def test_a_stopped_run_writes_one_last_checkpoint_and_the_model_before_its_evaluation(tmp_path):
    out, folder = tmp_path / "trained", tmp_path / "ckpt"
    stop, seen = Interruption(), SeeOutput(tmp_path / "trained")
    stop.signal = signal.SIGTERM  # as if SIGTERM came during step 1
    saves = ModelCheckpoint(dirpath=folder, every_n_train_steps=50, save_last=True, save_top_k=-1)
    trainer = L.Trainer(
        max_steps=3, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, limit_val_batches=1, callbacks=[stop, seen, saves], default_root_dir=tmp_path,
    )  # fmt: skip
    module = GRPOModule(group_size=2, sampler=SamplerConfig(num_slots=2, max_new_tokens=4), output_dir=str(out))
    trainer.fit(module, PromptDataModule(path="tiny", batch_size=2, eval_size=2, eval_batch_size=2))
    assert trainer.global_step == 1 and stop.step == 1
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt"]  # ModelCheckpoint's last is the same file
    assert stop.checkpoint == folder / "last.ckpt" == find_last_checkpoint([tmp_path])  # what --ckpt_path last takes
    assert seen.written is True  # the model was there before the evaluation began
