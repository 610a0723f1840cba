"""What both sides of ``bench vlm --parts trl`` share: the job's data in infgrpo's order, the LoRA, and the counters.

    data = job_data(job)                        # PromptDataModule over the shipped shapes rows, set up
    rows = ordered_rows(data, job["steps"])     # the rows each step trains on, in the order Lightning feeds them
    counts = Counts(model)                      # images through the vision tower, prefill positions, by phase
    with counts.phase("rollout"):
        ...
    counts.result()                             # {"rollout": {"images": ..., "tower_calls": ..., ...}, ...}
    with GCClock() as clock:                    # seconds spent in Python's garbage collections, and how many
        ...

The job is a dict (see :mod:`benchmarks.vlm`): ``model``, ``data``, ``prompts`` (a step's batch), ``group_size``,
``max_new_tokens``, ``lora_r``, ``lora_alpha``, ``lr``, ``steps``, ``seed``, ``threads``.

:class:`Counts` hooks the same two modules on either trainer's model, so what it counts does not depend on whose code
ran: the vision tower (each call adds the images it encoded: Qwen-VL's ``grid_thw`` rows, Idefics3's
``pixel_values``) and the language model (each call whose input is wider than one position is a prefill or a
training forward; in the rollout phase it is a prefill, and ``rows x width`` positions went through the model).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from typing import Any

from torch import nn

from benchmarks.learn_job import ordered_batches
from infgrpo.data import PromptDataModule
from infgrpo.vision.features import image_features_owner


def job_data(job: dict) -> PromptDataModule:
    """The job's data module (the shipped rows' first ``steps`` x ``prompts``, infgrpo's seed), set up."""
    data = PromptDataModule(
        path=job["data"], tokenizer=job["model"], batch_size=job["prompts"], train_size=job["steps"] * job["prompts"],
        eval_split=None, seed=job["seed"],
    )  # fmt: skip
    data.setup("fit")
    return data


def ordered_rows(data: PromptDataModule, steps: int) -> list[dict]:
    """The rows (TRL's format: ``prompt``, ``image``, ...) of the first ``steps`` batches, in infgrpo's order, with
    ``prompt_ids``: the ids infgrpo decodes from (the TRL side checks that TRL renders the same)."""
    items = [item for batch in ordered_batches(data, steps) for item in batch]
    return [{**item["meta"], "prompt_ids": list(item["prompt_ids"])} for item in items]


def lora_kwargs(job: dict, targets: str) -> dict[str, Any]:
    """peft ``LoraConfig`` arguments of the job: the language model's linear layers (``targets``, infgrpo's default
    for a VLM: :func:`infgrpo.vision.parts.language_lora_targets`), no dropout."""
    return {"r": job["lora_r"], "lora_alpha": job["lora_alpha"], "lora_dropout": 0.0, "target_modules": targets,
            "task_type": "CAUSAL_LM"}  # fmt: skip


class Counts:
    """Images through the vision tower and positions through the language model, by phase (module docstring)."""

    def __init__(self, model: nn.Module) -> None:
        owner = image_features_owner(model)
        self.qwen = hasattr(owner, "visual")  # Qwen-VL: forward(pixels, grid_thw), a grid row per image
        tower = owner.visual if self.qwen else owner.vision_model
        self.current = "other"
        self.counts: dict[str, dict[str, int]] = {}
        self.hooks = [
            tower.register_forward_hook(self._tower, with_kwargs=True),
            owner.language_model.register_forward_pre_hook(self._language, with_kwargs=True)
            if hasattr(owner, "language_model")
            else owner.text_model.register_forward_pre_hook(self._language, with_kwargs=True),
        ]

    def _add(self, key: str, n: int) -> None:
        phase = self.counts.setdefault(self.current, {})
        phase[key] = phase.get(key, 0) + n

    def _tower(self, module: nn.Module, args: tuple, kwargs: dict, out: Any) -> None:
        key, at = ("grid_thw", 1) if self.qwen else ("pixel_values", 0)
        self._add("images", int((kwargs[key] if key in kwargs else args[at]).shape[0]))
        self._add("tower_calls", 1)

    def _language(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        x = kwargs.get("inputs_embeds")
        if x is None:
            x = kwargs.get("input_ids", args[0] if args else None)
        rows, width = int(x.shape[0]), int(x.shape[1])
        if width > 1:  # a prefill (in the rollout) or a training forward; decode steps are one position wide
            self._add("wide_positions", rows * width)
            self._add("wide_calls", 1)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Counts inside the block go to ``name`` (outside any block: ``other``)."""
        before, self.current = self.current, name
        try:
            yield
        finally:
            self.current = before

    def remove(self) -> None:
        """Takes the hooks off the model."""
        for hook in self.hooks:
            hook.remove()

    def result(self) -> dict[str, dict[str, int]]:
        """``{phase: {"images", "tower_calls", "wide_positions", "wide_calls"}}`` (keys that never counted absent)."""
        return {k: dict(v) for k, v in self.counts.items()}


class GCClock:
    """Seconds spent in Python's garbage collections inside the block (automatic and explicit ones), by generation.

    A full collection (generation 2) walks every object the process holds: about 600,000 in a trainer process with
    torch, transformers and Lightning loaded, which is a second on a busy 2-core machine. infgrpo collects at the end
    of each phase on a CPU (before ``malloc_trim``, :mod:`infgrpo.runtime.host_memory`), so this shows that share.
    """

    def __enter__(self) -> GCClock:
        self.seconds = {0: 0.0, 1: 0.0, 2: 0.0}
        self.collections = {0: 0, 1: 0, 2: 0}
        self._start = 0.0
        gc.callbacks.append(self._callback)
        return self

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self._start
            self.collections[info["generation"]] += 1

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def result(self) -> dict[str, float]:
        """``gc_s`` (every generation), ``gc_full_s`` and ``gc_full_collections`` (generation 2)."""
        return {"gc_s": sum(self.seconds.values()), "gc_full_s": self.seconds[2],
                "gc_full_collections": self.collections[2]}  # fmt: skip
