"""An environment that owns its data (issue #59, item 2a): ``data.path: null`` gives TRL's placeholder rows, each with
a seed ``reset`` draws its task from, ``trainer.max_steps`` sets their number, and a run trains and resumes exactly
(the shipped tool model, its environment given as the class, as TRL's ``environment_factory=``)."""

import random

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from infgrpo import GRPOModule
from infgrpo.data import PromptDataModule
from infgrpo.data.placeholder_rows import placeholder_count, placeholder_row, placeholder_rows
from infgrpo.settings import ConfigError


class Sums:
    """The calculator task, owned by the environment: two operands drawn from the row's seed; ``add`` is its tool."""

    def reset(self, seed: int, **row) -> str:
        """A new task from ``seed``: its question is the prompt."""
        rng = random.Random(seed)
        self.a, self.b, self.called = rng.randint(1000, 99999), rng.randint(1000, 99999), None
        return f"{self.a}+{self.b}?"

    def add(self, a: int, b: int) -> int:
        """Adds two integers.

        Args:
            a: The first number.
            b: The second number.
        """
        self.called = (a, b)
        return a + b

    def get_reward(self) -> float:
        """1 when ``add`` got this task's operands."""
        return float(self.called == (self.a, self.b))


def answered(completions, environments, **kwargs):
    """1 when the last message holds the environment's sum."""
    return [float(str(env.a + env.b) in c[-1]["content"]) for c, env in zip(completions, environments, strict=True)]


def test_placeholder_rows_are_trls_with_a_seed_each_that_does_not_depend_on_their_number():
    rows = placeholder_rows(5, seed=7)
    assert all(r["prompt"] == [{"role": "user", "content": ""}] for r in rows)  # TRL's placeholder prompt
    assert len({r["seed"] for r in rows}) == 5 and all(0 <= r["seed"] < 2**31 for r in rows)
    assert rows[3] == placeholder_row(7, 3) == placeholder_rows(9, seed=7)[3] != placeholder_row(8, 3)
    assert placeholder_count(10, 4, 2) == 80 and placeholder_count(-1, 4, 1) is None


def test_the_data_module_holds_max_steps_batches_in_order_and_refuses_no_length():
    data = PromptDataModule(path=None, batch_size=2, eval_size=3)
    data.trainer = L.Trainer(max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    train, held_out = data.rows()
    assert train == placeholder_rows(8, data.hparams.seed) and len(held_out) == 3
    assert not {r["seed"] for r in held_out} & {r["seed"] for r in train}
    data.setup("fit")
    assert [b for b in data.train_dataloader().batch_sampler] == [[0, 1], [2, 3], [4, 5], [6, 7]]  # no shuffle
    data = PromptDataModule(path=None)
    data.trainer = L.Trainer(max_steps=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(ConfigError, match=r"^data.path=None .* needs trainer.max_steps >= 1, which sets the run's"):
        data.rows()
    with pytest.raises(ConfigError, match=r"^data.eval_fraction=0.1 holds out rows of data.path, which is null"):
        PromptDataModule(path=None, eval_fraction=0.1)


def fit(root, steps, ckpt_path=None):
    """A run on the tiny tool model without data, its environment given as a class; a checkpoint every step."""
    module = GRPOModule(
        policy={"model_name_or_path": "tiny-tools"}, group_size=2, seed=0, threads=1,
        sampler={"num_slots": 4, "max_new_tokens": 160},
        rewards={"functions": {f"{__name__}:answered": 1.0}, "accuracy": f"{__name__}:answered"},
        agent={"environment": Sums, "max_turns": 2}, optimizer={"learning_rate": 1e-3},
    )  # fmt: skip
    data = PromptDataModule(path=None, tokenizer="tiny-tools", batch_size=2, eval_split=None, seed=0)
    saves = ModelCheckpoint(dirpath=root, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    trainer = L.Trainer(
        max_steps=steps, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[saves], default_root_dir=root,
    )  # fmt: skip
    trainer.fit(module, data, ckpt_path=ckpt_path)
    return module


@pytest.mark.slow  # whole fits
def test_a_run_without_data_trains_and_resumes_exactly(tmp_path):
    straight = fit(tmp_path, 2)
    assert straight.hparams["agent"]["environment"] == f"{__name__}:Sums"  # the class, recorded by import path
    seeds = [item["meta"]["seed"] for item in straight.last_step.batch]
    assert seeds == [r["seed"] for r in placeholder_rows(4, 0)[2:]]  # step 2 took rows 2 and 3
    assert straight.last_step.scores.parts["Sums"].sum() > 0  # the model read the environment's question
    resumed = fit(tmp_path / "resumed", 2, ckpt_path=tmp_path / "step=1.ckpt")
    assert [item["meta"]["seed"] for item in resumed.last_step.batch] == seeds
    assert torch.equal(resumed.last_step.scores.total, straight.last_step.scores.total)
    want = dict(straight.policy.named_parameters())
    assert all(torch.equal(p, want[name]) for name, p in resumed.policy.named_parameters())
