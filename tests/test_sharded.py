"""Sharded training (``trainer.strategy: fsdp2``): 2 CPU processes (gloo) train as 1 process over the same global batch.

Each rank holds half of every parameter, gradient and optimizer state between steps (FSDP2 over a 2-rank mesh);
the rollout and the update run on the gathered parameters, each rank decoding its own number of steps and packing
its own number of micro-batches (``token_budget`` is small here, so they differ). Three optimization steps on
2 ranks x 2 prompts must leave the *gathered* parameters identical on both ranks and within 1e-11 of 1 process x
4 prompts in float64 (observed: 0 to ~1e-14; one step moves them ~1e-3), for ``grpo``/``group`` with full
fine-tuning and a KL term (its frozen reference sharded as well) and ``dapo``/``batch`` with LoRA; the held-out
evaluation (each rank decodes its share) gives one process's reward. The trained model is written once, in full
(``model.output_dir``).

A third sharded run checkpoints every step and is SIGKILLed at the start of step 3: its checkpoint resumes on 2
ranks to the uninterrupted run's parameters and optimizer state exactly, and in one process (4 prompts a step)
to the one-process parameters. The 2-rank runs start as a user's would: ``torchrun --nproc-per-node 2`` and the
CLI's ``main`` with ``--trainer.strategy fsdp2 --trainer.devices 2``; this file is their script.
"""

import json
import os
import shutil
import signal
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from infgrpo.fit import main
from infgrpo.settings import InfgrpoWarning

pytestmark = [
    pytest.mark.slow,  # spawns processes or runs whole fits: `pytest -m "not slow"` leaves it out
    # the full fine-tune's KL term turns the zero-advantage skip off, with its warning (tests.helpers.ALLOW_SKIP_OFF:
    # written out, as torchrun runs this file as a script, where tests/ is no package)
    pytest.mark.filterwarnings(
        r"ignore:\[infgrpo\] update\.skip_zero_advantage. off, because:infgrpo.settings.InfgrpoWarning"
    ),
]

ROOT = Path(__file__).resolve().parents[1]
GLOBAL_BATCH, STEPS = 4, 3
CASES = {"grpo-group-full": ("grpo", "group", 0), "dapo-batch-lora": ("dapo", "batch", 4)}  # loss, scale, lora r
FULL, LORA, KILLED, RESUMED = "grpo-group-full", "dapo-batch-lora", "killed", "lora-resumed"


def full_parameters(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter of ``module`` in full on this rank (gathered from the shards when it is sharded)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from infgrpo.trainer.sharding import is_sharded

    state = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True))  # a collective if sharded
    state = state if is_sharded(module) else module.state_dict()
    return {k: v.detach().clone() for k, v in state.items()}


class SaveSharded(L.Callback):
    """Writes the gathered policy after every step (``step{N}_rank{R}.pt``), each rank's micro-batch counts and shard
    sizes, the validation reward, and a checkpoint at the end; ``kill_at``: SIGKILLs each rank as that step starts."""

    def __init__(self, dirpath: str, kill_at: int = 0) -> None:
        self.dirpath, self.kill_at = Path(dirpath), kill_at

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.kill_at and trainer.global_step + 1 == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step, rank = trainer.global_step, trainer.global_rank
        torch.save(full_parameters(pl_module.policy), self.dirpath / f"step{step}_rank{rank}.pt")
        local = sum(
            p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in pl_module.policy.parameters()
        )
        record = {"micro_batches": float(trainer.callback_metrics["train/micro_batches"]), "local_numel": local}
        (self.dirpath / f"record{step}_rank{rank}.json").write_text(json.dumps(record))

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.global_step:  # resumed: the parameters the checkpoint restored
            torch.save(full_parameters(pl_module.policy), self.dirpath / f"start_rank{trainer.global_rank}.pt")

    def on_validation_end(self, trainer, pl_module) -> None:
        reward = float(trainer.callback_metrics["val/reward"])
        (self.dirpath / f"val{trainer.global_step}_rank{trainer.global_rank}.json").write_text(json.dumps(reward))

    def on_train_end(self, trainer, pl_module) -> None:
        trainer.save_checkpoint(self.dirpath / "end.ckpt")  # every rank calls it; rank 0 writes the full state


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    """32 training prompts of the tiny task and 4 held-out ones, as local splits."""
    from infgrpo.data.datamodule import load_rows

    folder = tmp_path_factory.mktemp("prompts")
    rows = load_rows("tiny", "train")[:36]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:32]))
    (folder / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[32:]))
    return folder


def args(data: Path, out: Path, case: str, batch_size: int, steps: int = STEPS, kill_at: int = 0) -> list[str]:
    loss_type, scale_rewards, lora = CASES[case if case in CASES else FULL]
    out.mkdir(parents=True, exist_ok=True)
    callback = {"class_path": f"{__name__}.SaveSharded", "init_args": {"dirpath": str(out), "kill_at": kill_at}}
    every_step = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": {"dirpath": str(out)}}
    every_step["init_args"] |= {"every_n_train_steps": 1, "save_last": True, "save_top_k": 0}
    evaluate = ["--data.eval_split=eval", "--data.eval_size=4", "--trainer.val_check_interval=2"]
    return [
        "--seed_everything=0",
        "--model.policy.model_name_or_path=tiny",
        "--model.policy.dtype=float64",
        f"--model.lora.r={lora}",
        "--model.group_size=4",
        "--model.sampler.num_slots=3",
        "--model.sampler.max_new_tokens=12",
        f"--model.update.token_budget={48 if lora else 64}",  # micro-batches per rank: different numbers, groups split
        "--model.optimizer.learning_rate=1e-3",
        f"--model.objective.loss_type={loss_type}",
        f"--model.objective.scale_rewards={scale_rewards}",
        f"--model.objective.beta={0.0 if lora else 0.04}",  # full fine-tuning: a frozen reference, sharded too
        f"--model.output_dir={'adapter' if lora else 'trained'}",
        f"--data.path={data}",
        f"--data.batch_size={batch_size}",
        *(evaluate if case == LORA else ["--data.eval_split=null"]),
        "--trainer.accelerator=cpu",
        f"--trainer.max_steps={steps}",
        "--trainer.logger=false",
        f"--trainer.enable_checkpointing={'true' if case == KILLED else 'false'}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        f"--trainer.default_root_dir={out}",
        f"--trainer.callbacks+={json.dumps(callback)}",
        *([f"--trainer.callbacks+={json.dumps(every_step)}"] if case == KILLED else []),
    ]


def sharded(case_args: list[str], distributed_checkpoint: bool = False) -> list[str]:
    """The 2-rank flags: ``fsdp2`` by name, or its class writing distributed checkpoints (a folder of shards)."""
    if not distributed_checkpoint:
        return [*case_args, "--trainer.strategy=fsdp2", "--trainer.devices=2"]
    strategy = ["--trainer.strategy=infgrpo.FSDP2Strategy", "--trainer.strategy.save_distributed_checkpoint=true"]
    return [*case_args, *strategy, "--trainer.devices=2"]


@pytest.fixture(scope="module")
def two_ranks(prompts, tmp_path_factory) -> Path:
    """The 2-rank runs: both cases, the killed run, then its resumption on 2 ranks."""
    from tests.helpers import torchrun_two  # not at the top: each rank runs this file as a script

    out = tmp_path_factory.mktemp("sharded")
    trained = torchrun_two(__file__, "train", str(prompts), str(out), what="the 2-rank sharded runs")
    assert (out / KILLED / "last.ckpt").exists(), trained.stderr[-3000:]  # it ran until the kill
    assert not (out / KILLED / "step3_rank0.pt").exists()
    assert trained.returncode != 0  # SIGKILLed (the cases before it completed: checked below)
    shutil.copy(out / KILLED / "last.ckpt", out / KILLED / "step2.ckpt")  # the resumed run writes last.ckpt again
    resumed = torchrun_two(__file__, "resume", str(prompts), str(out), what="the 2-rank resumption")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return out


def load(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def worst(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def one_process(prompts, tmp_path_factory) -> Path:
    """The references: 1 process x 4 prompts, 3 steps, each case (one torch thread, as each rank has)."""
    out, before = tmp_path_factory.mktemp("one_process"), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for case in CASES:
            main(args(prompts, out / case, case, GLOBAL_BATCH))
    finally:
        torch.set_num_threads(before)
    return out


@pytest.mark.parametrize("case", CASES)
def test_two_sharded_ranks_equal_one_process(two_ranks, one_process, case):
    two, ref = two_ranks / case, one_process / case
    counts = []
    for step in range(1, STEPS + 1):
        rank0, rank1 = load(two / f"step{step}_rank0.pt"), load(two / f"step{step}_rank1.pt")
        assert all(torch.equal(rank0[k], rank1[k]) for k in rank0), f"ranks diverged at step {step}"
        moved = worst(rank0, load(two / f"step{step - 1}_rank0.pt")) if step > 1 else 1.0
        assert moved > 1e-6  # the step trained
        gap = worst(rank0, load(ref / f"step{step}_rank0.pt"))
        assert gap < 1e-11, f"2 sharded ranks vs 1 process, step {step}: parameters differ by up to {gap:.3g}"
        records = [json.loads((two / f"record{step}_rank{r}.json").read_text()) for r in (0, 1)]
        counts.append(tuple(r["micro_batches"] for r in records))
        total = sum(v.numel() for v in rank0.values())
        assert all(r["local_numel"] < 0.6 * total for r in records)  # each rank holds about half (not the whole)
    assert any(a != b for a, b in counts), f"the ranks ran the same numbers of micro-batches: {counts}"
    if case == LORA:  # evaluation: each rank decodes its share on the gathered parameters
        want = json.loads((ref / "val2_rank0.json").read_text())
        for r in (0, 1):
            assert json.loads((two / f"val2_rank{r}.json").read_text()) == pytest.approx(want, abs=1e-12)
    assert_written(two, ref, load(two / f"step{STEPS}_rank0.pt"), lora=case == LORA)


def test_a_distributed_checkpoint_resumes_on_two_ranks(two_ranks):
    """LoRA's run wrote its checkpoint as shards (``save_distributed_checkpoint: true``): a folder that resumes on 2
    ranks with the parameters it saved, and trains on."""
    assert (two_ranks / LORA / "end.ckpt").is_dir() and (two_ranks / LORA / "end.ckpt" / "meta.pt").is_file()
    assert not list((two_ranks / LORA).glob("*.partial")) and not list((two_ranks / LORA).glob("*.old"))
    saved, resumed = load(two_ranks / LORA / f"step{STEPS}_rank0.pt"), two_ranks / RESUMED
    for r in (0, 1):
        start = load(resumed / f"start_rank{r}.pt")
        assert all(torch.equal(start[k], saved[k]) for k in saved)
    assert worst(load(resumed / f"step{STEPS + 1}_rank0.pt"), saved) > 1e-6  # and it trained a step further


def tensor_shapes(folder: Path) -> dict[str, dict[str, list[int]]]:
    """Each safetensors file of ``folder``: its tensors' names and shapes."""
    from safetensors import safe_open

    shapes = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, "pt") as f:
            shapes[path.name] = {k: f.get_slice(k).get_shape() for k in f.keys()}
    return shapes


def assert_written(two: Path, ref: Path, final: dict[str, torch.Tensor], lora: bool) -> None:
    """``model.output_dir`` holds the full trained model (or adapter), written once by rank 0, in what one process
    writes: the same files, tensor names and shapes (a weight the model ties, the LM head, once)."""
    from transformers import AutoModelForCausalLM

    from infgrpo.policy.load import load_policy

    name = "adapter" if lora else "trained"
    files = sorted(p.name for p in (two / name).iterdir())
    assert files == sorted(p.name for p in (ref / name).iterdir())
    shapes = tensor_shapes(two / name)
    assert shapes and shapes == tensor_shapes(ref / name)
    if not lora:
        assert "lm_head.weight" not in shapes["model.safetensors"]  # tied to the embeddings: written once
    if lora:
        from peft import PeftModel

        base = load_policy("tiny", dtype="float64")
        written = PeftModel.from_pretrained(base, two / "adapter").state_dict()
        adapters = [k for k in final if "lora_" in k]
        assert adapters and all(torch.equal(written[k], final[k]) for k in adapters)
    else:
        written = AutoModelForCausalLM.from_pretrained(two / "trained", dtype=torch.float64).state_dict()
        assert all(torch.equal(written[k], final[k]) for k in final)


def test_a_killed_sharded_run_resumes_exactly_on_two_ranks_and_in_one_process(
    tmp_path, prompts, two_ranks, one_process
):
    killed, uninterrupted = two_ranks / KILLED, two_ranks / FULL
    # 1) on 2 ranks: the parameters and optimizer state of the run that was never stopped
    final = load(killed / f"step{STEPS}_rank0.pt")
    assert all(torch.equal(final[k], v) for k, v in load(uninterrupted / f"step{STEPS}_rank0.pt").items())
    a, b = (torch.load(p / "end.ckpt", weights_only=False) for p in (killed, uninterrupted))
    assert a["optimizer_states"][0]["state"].keys() == b["optimizer_states"][0]["state"].keys()
    for key, state in a["optimizer_states"][0]["state"].items():
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(state[name], b["optimizer_states"][0]["state"][key][name]), (key, name)
    # 2) in one process with 4 prompts a step: where one process would have been
    ref, resumed, before = one_process / FULL, tmp_path / "resumed", torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.warns(InfgrpoWarning, match=r"data\.batch_size=4 differs from the checkpoint's 2"):
            main([*args(prompts, resumed, FULL, GLOBAL_BATCH), f"--ckpt_path={killed / 'step2.ckpt'}"])
    finally:
        torch.set_num_threads(before)
    assert not (resumed / "step2_rank0.pt").exists()  # it did not redo steps 1-2
    gap = worst(load(resumed / f"step{STEPS}_rank0.pt"), load(ref / f"step{STEPS}_rank0.pt"))
    assert gap < 1e-11, f"resumed in one process: parameters differ by up to {gap:.3g}"


if __name__ == "__main__":  # a rank under torchrun: python -m torch.distributed.run ... <mode> <prompts> <out>
    mode, data, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    if mode == "train":
        for case in CASES:  # LoRA's run writes Lightning's distributed checkpoint (a folder of shards)
            main(sharded(args(data, out / case, case, GLOBAL_BATCH // 2), distributed_checkpoint=case == LORA))
        main(sharded(args(data, out / KILLED, KILLED, GLOBAL_BATCH // 2, kill_at=3)))  # never returns
    else:  # the killed run resumed, and LoRA's distributed checkpoint for one more step
        lora = args(data, out / RESUMED, LORA, GLOBAL_BATCH // 2, steps=STEPS + 1)
        main([*sharded(lora, distributed_checkpoint=True), f"--ckpt_path={out / LORA / 'end.ckpt'}"])
        main(
            [*sharded(args(data, out / KILLED, KILLED, GLOBAL_BATCH // 2)), f"--ckpt_path={out / KILLED / 'last.ckpt'}"]
        )
