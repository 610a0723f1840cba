"""The job of ``bench learn``, as both trainers' child processes rebuild it: data, order, reward, proofs, memory.

    job = {"model": "smollm2", "task": "chain_sum", "prompts": 4, "group_size": 8, ...}   # see bench.learn
    data = job_data(job)                       # the PromptDataModule both trainers draw from (set up)
    batches = ordered_batches(data, steps)     # infgrpo's prompts of each step, in its order
    prompts_sha(texts), adapter_sha(model)     # what a step trained on; the LoRA weights
    evaluate_one(job)                          # held-out greedy accuracy of the base model or an adapter
    write_trl_data(job, folder)                # --format trl: the task as TRL's conversational jsonl, two files
    snapshot_steps(job), snapshot_dir(d, k)    # the held-out curve's adapters: after which steps, where

Everything a trainer needs to run the same job lives here, so the infgrpo child
(:mod:`~benchmarks.learn_infgrpo`), the TRL child (:mod:`~benchmarks.learn_trl`) and the
evaluation children build it with one function each: the same :class:`~infgrpo.data.PromptDataModule`
(so the same held-out prompts are left out of training), the same reward by name, the same hashes.

``--format trl`` (:data:`FORMATS`): the job's task is written once, by :func:`write_trl_data`, as two files in
TRL's conversational format, ``train.jsonl`` (the training questions the data module would generate) and
``eval.jsonl`` (its ``eval_size`` held-out ones), each row::

    {"prompt": [{"role": "user", "content": "<question> Put the final answer in \\boxed{}."}], "solution": "<answer>"}

(the user turn: :data:`BOXED`); both trainers read those files (the job's ``data_files``) and are rewarded by
TRL's own ``trl.rewards:accuracy_reward`` (math-verify of the ``\\boxed{}`` answer against ``solution``).

``--recipe boxed`` (:data:`RECIPES`) makes it a reasoning recipe's job: each row's prompt is a system message
(:data:`BOXED_SYSTEM`: answer in ``\\boxed{}``, with one example) and the question as the user turn, and both trainers
are rewarded by :data:`~benchmarks.learn_rewards.RECIPE_REWARDS` (a format reward and ``accuracy_reward``, weights
1 and 1); held-out accuracy stays ``accuracy_reward`` >= 1.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.memory import PeakRSS
from infgrpo.data import PromptDataModule
from infgrpo.data.conversation import last_user_text
from infgrpo.evaluation import evaluate
from infgrpo.policy.load import load_policy, load_tokenizer

TINY_TASK = "tiny"
"""``--task tiny``: the shipped synthetic task (rewarded by ``synthetic``); any other name is a reasoning-gym task."""
CHAIN_SUM = {"min_terms": 2, "max_terms": 2, "max_digits": 2}
"""The default ``--task-config`` of ``chain_sum``: two terms of at most two digits."""
ANSWER_ONLY = "{question} Give only the final answer."
"""The user turn of a reasoning-gym task (the default ``--prompt-template``)."""
BOXED = "{question} Put the final answer in \\boxed{{}}."
"""The user turn of ``--format trl`` (a ``str.format`` template over a task row): ``"<question> Put the final answer
in \\boxed{}."``, the answer form ``trl.rewards:accuracy_reward`` reads."""
TRL_ACCURACY = "trl.rewards:accuracy_reward"
"""The reward (and accuracy) of ``--format trl``: TRL's own function, by its import path."""
FORMATS = ("infgrpo", "trl")
"""``--format``: ``infgrpo`` (the data module generates the task's prompts; reward ``reasoning_gym``, behind TRL's
signature on the TRL side), ``trl`` (both trainers read the task written as TRL's conversational jsonl and are
rewarded by :data:`TRL_ACCURACY`)."""
BOXED_SYSTEM = "Put your final answer within \\boxed{}. Example: 3 + 4 = \\boxed{7}"
"""The system message of ``--recipe boxed``: DeepSeek-R1's recipe wording ("put your final answer within
\\boxed{}") and one example. A probe of the untrained SmolLM2-135M-Instruct (8 training prompts x 4 completions,
temperature 1, 64 new tokens) boxed 6 of 32 completions with it, against 3 of 32 (at 96 tokens) for a longer
helpful-assistant wording with the example, 1 of 32 for "Reply with the final answer only, as in this
example." + the example; none of the 96 was a right answer."""
RECIPES = {
    "none": {"system": None, "template": BOXED, "max_new_tokens": 48},
    "boxed": {"system": BOXED_SYSTEM, "template": "{question}", "max_new_tokens": 64},
}
"""``--recipe`` of ``--format trl``: ``none`` (the user turn :data:`BOXED`, no system message, reward
``accuracy_reward``), ``boxed`` (system message :data:`BOXED_SYSTEM`, the question as the user turn, rewards
:data:`~benchmarks.learn_rewards.RECIPE_REWARDS`, 64 new tokens by default: room for a short working and the box)."""
MAX_PROMPT_TOKENS = 512
"""Prompts longer than this are an error (neither trainer truncates them)."""


def default_task_config(task: str) -> dict[str, Any] | None:
    """``--task-config`` when none is given: ``chain_sum``'s two-term sums, ``{}`` for another reasoning-gym task."""
    if task == TINY_TASK:
        return None
    return dict(CHAIN_SUM) if task == "chain_sum" else {}


def default_template(task: str, fmt: str = "infgrpo", recipe: str = "none") -> str | None:
    """``--prompt-template`` when none is given: the prompt as it is for ``tiny``, :data:`ANSWER_ONLY` otherwise;
    for ``--format trl`` the recipe's user turn (:data:`RECIPES`: :data:`BOXED` without a recipe)."""
    if fmt == "trl":
        return RECIPES[recipe]["template"]
    return None if task == TINY_TASK else ANSWER_ONLY


def reward_name(task: str, fmt: str = "infgrpo") -> str:
    """The reward (and accuracy) function of a task: ``synthetic`` for ``tiny``, else ``reasoning_gym``;
    :data:`TRL_ACCURACY` for ``--format trl``."""
    if fmt == "trl":
        return TRL_ACCURACY
    return "synthetic" if task == TINY_TASK else "reasoning_gym"


def job_rewards(job: dict) -> dict[str, float]:
    """The rewards both trainers are given, ``{name: weight}`` (names as infgrpo's ``rewards.functions``):
    :data:`~benchmarks.learn_rewards.RECIPE_REWARDS` for ``--recipe boxed``, else the job's one reward."""
    if job.get("recipe", "none") == "boxed":
        from benchmarks.learn_rewards import RECIPE_REWARDS

        return dict(RECIPE_REWARDS)
    return {job["reward_function"]: 1.0}


def is_trl_format(job: dict) -> bool:
    """Whether the job is ``--format trl`` (results recorded before the flag have no ``format``: ``infgrpo``)."""
    return job.get("format", "infgrpo") == "trl"


def reward_on_error(job: dict) -> str:
    """``rewards.on_error`` of the job: ``skip`` for ``--format trl`` (TRL's accuracy_reward gives None for a gold
    solution it cannot parse; TRL leaves such values out), else infgrpo's default ``raise``."""
    return "skip" if is_trl_format(job) else "raise"


def trl_rows(rows: list[dict], template: str, system: str | None = None) -> list[dict[str, Any]]:
    """Task rows (the data module's, with ``question`` and ``answer``) as TRL's conversational rows:
    ``{"prompt": [{"role": "user", "content": template.format(**row)}], "solution": str(answer)}``, the prompt
    opened by ``{"role": "system", "content": system}`` when ``system`` is given."""
    head = [{"role": "system", "content": system}] if system is not None else []
    user = [{"role": "user", "content": template.format(**row)} for row in rows]
    return [{"prompt": [*head, turn], "solution": str(row["answer"])} for turn, row in zip(user, rows, strict=True)]


def write_trl_data(job: dict, folder: str | Path) -> dict[str, Any]:
    """Writes the job's task as ``train.jsonl`` and ``eval.jsonl`` in ``folder`` (see the module docstring).

    The questions are the ones the ``--format infgrpo`` job trains and evaluates on: the data module's own
    reasoning-gym rows (same task config, seeds, ``train_size`` and ``eval_size``; no training question is a held-out
    one), one JSON object a line, in the data module's order. Returns ``{"train": {"path", "rows", "sha"}, "eval":
    ...}`` (``sha``: :func:`digest` of the rows).
    """
    source = PromptDataModule(path=f"reasoning_gym:{job['task']}", task_config=job["task_config"],
                              eval_size=job["eval_size"])  # fmt: skip
    train, held_out = source.rows()
    out = {}
    for split, rows in (("train", train), ("eval", held_out)):
        converted = trl_rows(rows, job["prompt_template"], RECIPES[job.get("recipe", "none")]["system"])
        path = Path(folder) / f"{split}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in converted))
        out[split] = {"path": str(path), "rows": len(converted), "sha": digest(converted)}
    return out


def data_kwargs(job: dict) -> dict[str, Any]:
    """``PromptDataModule`` arguments of the job (one set for training and evaluation, in every child).

    The held-out split is always on (``eval_size`` prompts): a reasoning-gym source drops the held-out
    questions from training only when it has them, so training without it would see other prompts.
    """
    task = job["task"]
    common = dict(tokenizer=job["model"], gguf_file=job["gguf_file"], batch_size=job["prompts"],
                  eval_size=job["eval_size"], seed=job["seed"], max_prompt_length=MAX_PROMPT_TOKENS)  # fmt: skip
    if is_trl_format(job):  # the written files, conversational: the chat template renders them, no template
        files = job["data_files"]
        return dict(path=files["train"]["path"], eval_path=files["eval"]["path"], **common)
    source = {"path": "tiny"} if task == TINY_TASK else {"path": f"reasoning_gym:{task}"}
    if task != TINY_TASK:
        source["task_config"] = job["task_config"]
    return dict(source, prompt_template=job["prompt_template"], **common)


def snapshot_steps(job: dict) -> list[int]:
    """The steps after which a trainer writes its adapter for the held-out curve: every ``eval_every``, not the last."""
    every = job.get("eval_every", 0)
    return list(range(every, job["steps"], every)) if every > 0 else []


def out_of_time(job: dict, seconds: list[float]) -> bool:
    """Whether a run whose steps took ``seconds`` has spent the job's clock (``--minutes``; 0: no clock)."""
    return job.get("minutes", 0) > 0 and sum(seconds) >= 60.0 * job["minutes"]


VARIANTS = {
    "default": {},
    "plain": {"update.skip_zero_advantage": "off"},
    "dynamic": {"dynamic_sampling.enabled": True},
    "adaptive": {"adaptive_groups.enabled": True},
    "dynamic+adaptive": {"dynamic_sampling.enabled": True, "adaptive_groups.enabled": True},
}
"""``--variants`` of the infgrpo runs: its defaults (the zero-advantage skip on where exact), ``plain`` (every
row through the update, as before the skip), ``dynamic`` (dynamic sampling, with the skip), ``adaptive``
(adaptive groups at their defaults, with the skip) and ``dynamic+adaptive`` (both)."""
KINDS = ("add2", "add3", "sub+", "neg")
"""The kinds of a ``chain_sum`` answer (:func:`answer_kind`)."""


def answer_kind(meta: dict) -> str:
    """The kind of a two-term ``chain_sum`` answer: ``add2`` (a sum below 100), ``add3`` (a sum of 100 or more),
    ``sub+`` (a difference >= 0) or ``neg`` (a negative difference)."""
    answer, expression = int(meta["answer"]), meta["question"].split(":")[-1]
    if answer < 0:
        return "neg"
    if "+" in expression:
        return "add3" if answer >= 100 else "add2"
    return "sub+"


def trl_answer_kind(meta: dict) -> str:
    """:func:`answer_kind` of a ``--format trl`` row (its user turn holds the question, ``solution`` the answer)."""
    return answer_kind({"answer": meta["solution"], "question": last_user_text(meta["prompt"])})


def kind_of(job: dict) -> Callable[[dict], str] | None:
    """The held-out accuracy's grouping of the job (``chain_sum``: :func:`answer_kind`), or None."""
    if job["task"] != "chain_sum":
        return None
    return trl_answer_kind if is_trl_format(job) else answer_kind


def snapshot_dir(adapter_dir: str, step: int) -> str:
    """Where a trainer writes its adapter after ``step`` optimizer steps (beside its final ``adapter_dir``)."""
    return f"{adapter_dir}-step{step}"


def job_data(job: dict) -> PromptDataModule:
    """The job's data module, set up (training and held-out prompts tokenized)."""
    data = PromptDataModule(**data_kwargs(job))
    data.setup("fit")
    return data


def ordered_batches(data: PromptDataModule, steps: int) -> list[list[dict]]:
    """The first ``steps`` training batches in the order Lightning feeds them to ``GRPOModule``.

    One data loader iterated epoch after epoch, as Lightning does (its seeded batch sampler starts the
    next epoch when one is used up).
    """
    loader, batches = data.train_dataloader(), []
    while len(batches) < steps:
        before = len(batches)
        for batch in loader:
            batches.append(batch)
            if len(batches) == steps:
                break
        if len(batches) == before:
            raise ValueError(f"the data module yields no batch of {data.hparams.batch_size} prompts")
    return batches


def digest(obj: Any) -> str:
    """The first 16 hex digits of the SHA-256 of ``obj`` as compact JSON."""
    return hashlib.sha256(json.dumps(obj, separators=(",", ":")).encode()).hexdigest()[:16]


def step_record(texts: list[str], ids: list[list[int]], completions: int) -> dict[str, Any]:
    """What one step trained on: hashes of its prompts (user turns; token ids) and its number of completions."""
    return {"prompts_sha": digest(texts), "prompt_ids_sha": digest(ids), "completions": completions}


def adapter_sha(model: torch.nn.Module) -> str:
    """A hash of the LoRA weights of ``model`` (every ``lora_`` parameter, by name): equal means equal adapters."""
    h = hashlib.sha256()
    for name, p in sorted((n, p) for n, p in model.named_parameters() if "lora_" in n):
        h.update(name.encode())
        h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def lora_settings(model: torch.nn.Module) -> dict[str, Any]:
    """The LoRA settings of a peft model as it was built (target modules as resolved, sorted)."""
    cfg = model.peft_config["default"]
    targets = cfg.target_modules
    return {
        "lora_r": cfg.r,
        "lora_alpha": cfg.lora_alpha,
        "lora_dropout": cfg.lora_dropout,
        "lora_target_modules": sorted(targets) if not isinstance(targets, str) else targets,
    }


def optimizer_settings(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Learning rate, betas, eps and weight decay of the optimizer's first parameter group, and its class."""
    group = optimizer.param_groups[0]
    return {
        "optimizer": type(optimizer).__name__,
        "adam_betas": list(group["betas"]),
        "adam_eps": group["eps"],
        "weight_decay": group["weight_decay"],
    }


class TrainingMemory:
    """This process's memory during training: peak RSS (absolute and its rise), and CUDA's allocator peaks.

    with TrainingMemory() as memory:
        trainer.fit(...)
    memory.result()    # {"rss_peak_bytes", "rss_rise_bytes", "rss_base_bytes"[, "cuda_max_allocated_bytes", ...]}

    CUDA's peaks are the allocator's since entry, and at least every peak handed to :meth:`observe`
    (infgrpo resets the allocator's peaks at each phase of a step and reports each phase's own).
    """

    def __init__(self) -> None:
        self.cuda_allocated = self.cuda_reserved = 0

    def observe(self, allocated: int, reserved: int) -> None:
        """A peak measured inside the window, before something reset the allocator's counters."""
        self.cuda_allocated, self.cuda_reserved = max(self.cuda_allocated, allocated), max(self.cuda_reserved, reserved)

    def __enter__(self) -> TrainingMemory:
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        self.rss = PeakRSS().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.rss.__exit__()

    def result(self) -> dict[str, int]:
        """The figures (bytes)."""
        out = {"rss_peak_bytes": self.rss.peak, "rss_rise_bytes": self.rss.peak - self.rss.base}
        out["rss_base_bytes"] = self.rss.base
        if torch.cuda.is_available():
            out["cuda_max_allocated_bytes"] = max(torch.cuda.max_memory_allocated(), self.cuda_allocated)
            out["cuda_max_reserved_bytes"] = max(torch.cuda.max_memory_reserved(), self.cuda_reserved)
        return out


def device_info() -> dict[str, Any]:
    """The device the child ran on and its torch CPU threads."""
    info: dict[str, Any] = {"device": "cuda" if torch.cuda.is_available() else "cpu"}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    info["torch_threads"] = torch.get_num_threads()
    return info


def evaluate_one(job: dict) -> dict[str, Any]:
    """Held-out greedy accuracy of the base model (``adapter_dir`` None) or of a trained adapter, in this process.

    The same function for every trainer: the job's held-out prompts (:func:`job_data`), the base model
    loaded by infgrpo's loader, the adapter by peft, :func:`infgrpo.evaluation.evaluate` at temperature 0
    with the job's ``max_new_tokens`` and reward; for ``chain_sum`` also ``accuracy_by`` (:func:`answer_kind`:
    ``{kind: [right, prompts]}``). With ``--format trl`` the held-out items are the conversational rows of
    ``eval.jsonl`` (the reward gets their messages as ``prompts`` and one-message completions) and the reward's
    None values (an unparseable gold solution) are left out (``reward_on_error`` ``skip``).
    """
    start = time.perf_counter()
    data = job_data(job)
    tok = load_tokenizer(job["model"], job["gguf_file"])
    model = load_policy(job["model"], job["dtype"], gguf_file=job["gguf_file"])
    if job.get("adapter_dir"):
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, job["adapter_dir"])
    model = model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    reward = job["reward_function"]
    result = evaluate(
        model, tok, data.eval_items, {reward: 1.0}, accuracy=reward, max_new_tokens=job["max_new_tokens"],
        on_error=reward_on_error(job), group_by=kind_of(job),
    )  # fmt: skip
    return {
        **result,
        "eval_prompts": len(data.eval_items),
        "eval_prompts_sha": digest([it["prompt_ids"] for it in data.eval_items]),
        "adapter_sha": adapter_sha(model) if job.get("adapter_dir") else None,
        "seconds": time.perf_counter() - start,
    }
