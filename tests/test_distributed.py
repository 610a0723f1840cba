"""DDP equivalence: 2 CPU processes (gloo) train as 1 process over the same global batch.

Two optimization steps on 2 ranks x 2 prompts must leave parameters (and the length predictor's
state) identical on both ranks and equal, in float64, to 1 process x 4 prompts (observed: ~1e-14
apart, against ~1e-3 moved per step; the bound is 1e-11). This holds only if the ranks see the
global batch's prompts, draw the same completions (streams keyed by the global prompt index),
normalize by global counts and std, and accumulate gradients over different numbers of
micro-batches per rank (token_budget is small here) without deadlocking DDP. The 2-rank checkpoint
then resumes on 1 rank exactly where 1 process was.

The 2-rank runs start as a user's would: ``torchrun --nproc-per-node 2`` and the CLI's ``main``
with ``--trainer.strategy ddp --trainer.devices 2``. This file is their script, so both cases share
one start of two processes (imports dominate the time); the references run in this process.
"""

import json
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch

from infgrpo.fit import main
from infgrpo.settings import InfgrpoWarning

pytestmark = pytest.mark.slow  # spawns processes or runs whole fits: `pytest -m "not slow"` leaves it out

ROOT = Path(__file__).resolve().parents[1]
GLOBAL_BATCH = 4
CASES = {"grpo-group": ("grpo", "group"), "dapo-batch": ("dapo", "batch")}  # loss_type, scale_rewards


class SaveParameters(L.Callback):
    """Writes the policy after every step (``step{N}_rank{R}.pt``) and a checkpoint at the end."""

    def __init__(self, dirpath: str) -> None:
        self.dirpath = Path(dirpath)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        params = {k: v.detach().clone() for k, v in pl_module.policy.state_dict().items()}
        torch.save(params, self.dirpath / f"step{trainer.global_step}_rank{trainer.global_rank}.pt")
        predictor = pl_module.sampler.predictor.state_dict()
        torch.save(predictor, self.dirpath / f"predictor{trainer.global_step}_rank{trainer.global_rank}.pt")
        record = pl_module.last_step  # the prompts this rank trained on, and its rollout's dynamic counts
        trained = {"prompts": [b["meta"]["prompt"] for b in record.batch], "stats": record.rollouts.stats}
        trained["stats"] = {k: v for k, v in trained["stats"].items() if k.startswith(("dynamic/", "adaptive/"))}
        trained["rewards"] = record.scores.total.tolist()
        (self.dirpath / f"trained{trainer.global_step}_rank{trainer.global_rank}.json").write_text(json.dumps(trained))

    def on_train_end(self, trainer, pl_module) -> None:
        trainer.save_checkpoint(self.dirpath / "last.ckpt")  # every rank calls it; rank 0 writes


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    """32 prompts of the tiny task as a local split (tokenizing all 8,000 would cost each run ~2 s)."""
    from infgrpo.data.datamodule import load_rows

    folder = tmp_path_factory.mktemp("prompts")
    rows = load_rows("tiny", "train")[:32]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def args(data: Path, out: Path, steps: int, batch_size: int, loss_type: str, scale_rewards: str) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    callback = {"class_path": f"{__name__}.SaveParameters", "init_args": {"dirpath": str(out)}}
    return [
        "--seed_everything=0",
        "--model.policy.model_name_or_path=tiny",
        "--model.policy.dtype=float64",
        "--model.group_size=4",
        "--model.sampler.num_slots=3",
        "--model.sampler.max_new_tokens=12",
        "--model.update.token_budget=48",  # several micro-batches per rank, different numbers, groups split
        "--model.optimizer.learning_rate=1e-3",
        f"--model.objective.loss_type={loss_type}",
        f"--model.objective.scale_rewards={scale_rewards}",
        f"--data.path={data}",
        f"--data.batch_size={batch_size}",
        "--data.eval_split=null",
        "--trainer.accelerator=cpu",
        f"--trainer.max_steps={steps}",
        "--trainer.logger=false",
        "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        f"--trainer.default_root_dir={out}",
        f"--trainer.callbacks+={json.dumps(callback)}",
    ]


def load(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def assert_close(a: dict, b: dict, what: str) -> None:
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-11, f"{what}: parameters differ by up to {worst:.3g}"


@pytest.fixture
def one_thread():
    """One torch thread, as each DDP process gets: on a busy 2-core machine two spinning OpenMP
    threads per process make small float64 matmuls ~30x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def two_ranks(prompts, tmp_path_factory) -> Path:
    """Runs this file under torchrun: 2 ranks x 2 prompts, 2 steps, every case (imports paid once)."""
    from tests.helpers import torchrun_two  # not at the top: each rank runs this file as a script

    out = tmp_path_factory.mktemp("two_ranks")
    start = time.perf_counter()
    done = torchrun_two(__file__, str(prompts), str(out), what="the 2-rank DDP run")
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"\n2-rank DDP runs ({len(CASES)} cases): {time.perf_counter() - start:.1f} s")
    return out


@pytest.mark.parametrize("case", CASES)
def test_two_ddp_ranks_equal_one_process_and_resume_on_one(tmp_path, prompts, two_ranks, one_thread, case):
    loss_type, scale_rewards = CASES[case]
    two = two_ranks / case
    # 1) the reference: one process, 4 prompts a step, 4 steps
    ref = tmp_path / "one"
    main(args(prompts, ref, 4, GLOBAL_BATCH, loss_type, scale_rewards))
    # 2) two ranks of 2 prompts: identical on both ranks, equal to the reference after each step
    for step in (1, 2):
        rank0, rank1 = load(two / f"step{step}_rank0.pt"), load(two / f"step{step}_rank1.pt")
        assert all(torch.equal(rank0[k], rank1[k]) for k in rank0), f"ranks diverged at step {step}"
        assert_close(rank0, load(ref / f"step{step}_rank0.pt"), f"2 ranks vs 1 process, step {step}")
        # the length predictor learned the pooled rollouts: the same on both ranks and as 1 process
        p0, p1 = load(two / f"predictor{step}_rank0.pt"), load(two / f"predictor{step}_rank1.pt")
        want = load(ref / f"predictor{step}_rank0.pt")
        assert p0["history_keys"] == p1["history_keys"] == want["history_keys"]
        assert p0["history_values"] == p1["history_values"]
        assert torch.equal(p0["A"], p1["A"]) and torch.equal(p0["b"], p1["b"])
        torch.testing.assert_close(p0["A"], want["A"], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(torch.tensor(p0["history_values"]), torch.tensor(want["history_values"]))
    # 3) the 2-rank checkpoint resumes in one process (4 prompts a step) where the reference went
    resumed = tmp_path / "resumed"
    with pytest.warns(InfgrpoWarning, match=r"data\.batch_size=4 differs from the checkpoint's 2"):  # said, not silent
        main([*args(prompts, resumed, 4, GLOBAL_BATCH, loss_type, scale_rewards), f"--ckpt_path={two / 'last.ckpt'}"])
    assert_close(load(resumed / "step4_rank0.pt"), load(ref / "step4_rank0.pt"), "resumed on 1 rank, step 4")
    assert not (resumed / "step2_rank0.pt").exists()  # it did not redo steps 1-2


def test_two_ddp_ranks_with_dynamic_sampling_each_fill_their_share_and_stay_identical(two_ranks):
    """Each rank draws from its own share of the prompt stream until it holds its batch of informative groups;
    DDP keeps the parameters identical (no rank waits forever on a collective the other skipped)."""
    two = two_ranks / DYNAMIC
    for step in (1, 2):
        rank0, rank1 = load(two / f"step{step}_rank0.pt"), load(two / f"step{step}_rank1.pt")
        assert all(torch.equal(rank0[k], rank1[k]) for k in rank0), f"ranks diverged at step {step}"
        seen = [json.loads((two / f"trained{step}_rank{r}.json").read_text()) for r in (0, 1)]
        for rank in seen:
            assert len(rank["prompts"]) == GLOBAL_BATCH // 2  # each rank trains on its share of the batch
            groups = [rank["rewards"][i : i + 4] for i in range(0, len(rank["rewards"]), 4)]
            if not rank["stats"]["dynamic/capped"]:
                assert all(len(set(g)) > 1 for g in groups)  # informative: the rewards have a spread
        assert not set(seen[0]["prompts"]) & set(seen[1]["prompts"])  # disjoint shares of the stream


def test_two_ddp_ranks_with_adaptive_groups_each_grow_their_own_and_stay_identical(two_ranks):
    """Each rank grows the groups of its own share of the batch, within its own budget (the ranks' rollouts take
    different numbers of decode steps); DDP keeps the parameters identical."""
    two = two_ranks / ADAPTIVE
    grew = 0
    for step in (1, 2):
        rank0, rank1 = load(two / f"step{step}_rank0.pt"), load(two / f"step{step}_rank1.pt")
        assert all(torch.equal(rank0[k], rank1[k]) for k in rank0), f"ranks diverged at step {step}"
        seen = [json.loads((two / f"trained{step}_rank{r}.json").read_text()) for r in (0, 1)]
        for rank in seen:
            assert len(rank["prompts"]) == GLOBAL_BATCH // 2 and len(rank["rewards"]) == 4 * GLOBAL_BATCH // 2
            assert 4 <= rank["stats"]["adaptive/samples_per_prompt_max"] <= 64  # the default cap
            grew += rank["stats"]["adaptive/groups_extended"]
        assert not set(seen[0]["prompts"]) & set(seen[1]["prompts"])  # each rank its own share of the batch
    assert grew > 0  # some group had no spread at G and grew
    # model.output_dir was written once at the end of the DDP run (and the run exited 0): the trained weights
    from transformers import AutoModelForCausalLM

    written = AutoModelForCausalLM.from_pretrained(two / "trained", dtype=torch.float64).state_dict()
    final = load(two / "step2_rank0.pt")
    assert all(torch.equal(written[k], final[k]) for k in final if k in written) and len(written) > 0


DYNAMIC, ADAPTIVE = "dynamic", "adaptive"

if __name__ == "__main__":  # a DDP rank under torchrun: python -m torch.distributed.run ... <prompts> <out>
    data, out = Path(sys.argv[1]), Path(sys.argv[2])
    for case, (loss_type, scale_rewards) in CASES.items():
        two_rank_args = args(data, out / case, 2, GLOBAL_BATCH // 2, loss_type, scale_rewards)
        main([*two_rank_args, "--trainer.strategy=ddp", "--trainer.devices=2"])
    dynamic = [
        *args(data, out / DYNAMIC, 2, GLOBAL_BATCH // 2, "grpo", "group"),
        "--model.dynamic_sampling.enabled=true",
    ]
    main([*dynamic, "--trainer.strategy=ddp", "--trainer.devices=2"])
    adaptive = [
        *args(data, out / ADAPTIVE, 2, GLOBAL_BATCH // 2, "grpo", "group"),
        "--model.adaptive_groups.enabled=true",
        "--model.output_dir=trained",  # written once at the end, by rank 0, every rank taking part (#45)
    ]
    main([*adaptive, "--trainer.strategy=ddp", "--trainer.devices=2"])
