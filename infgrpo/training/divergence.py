"""A run that diverged stops at the step it did, with one error that says what, where and what to change.

    check_update(update.stats["loss"], policy, settings, trainer)    # after each update: raises DivergenceError
    raise rollout_divergence(err, settings, trainer) from err        # a NonFiniteLogitsError of the sampler

After each update the training step checks, in this order, the loss (already a host float), the gradient's norm
(the last optimizer step's, after clipping: a non-finite one stays non-finite) and the parameters' norm, both
norms in float32 and read in one host transfer. A parameters' norm that overflows float32 (weights past ~1e19,
as ``learning_rate: 1e30`` makes them: each weight finite, the model's output uniform) counts as non-finite:
no run that learns has such weights. The first non-finite one raises :class:`DivergenceError` naming it, the
step (``trainer.global_step``: optimizer steps done), the settings that likely caused it and the last checkpoint
written before it. Every earlier step passed the check, so that checkpoint's weights are finite. The rollout's
non-finite logits (:class:`~infgrpo.sampler.engine.finite.NonFiniteLogitsError`, raised by the sampler, which
knows nothing of these settings) become the same error.

The loss and the norms are of the global batch and of parameters every data-parallel rank holds alike, so every
rank raises at the same step.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from infgrpo.sampler.engine.finite import NonFiniteLogitsError
from infgrpo.training.hparams import ModuleSettings


class DivergenceError(RuntimeError):
    """Training diverged: ``what`` (``"loss"``, ``"gradient norm"``, ``"parameter norm"``, ``"logits"``) became
    non-finite, found after ``step`` optimizer steps (``trainer.global_step``). ``settings``: the setting keys that
    likely caused it, most likely first; ``checkpoint``: the last checkpoint written before it, or None."""

    def __init__(self, message: str, what: str, step: int, settings: list[str], checkpoint: str | None) -> None:
        super().__init__(message)
        self.what, self.step, self.settings, self.checkpoint = what, step, settings, checkpoint


def float32_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all of ``tensors`` together, as a float32 () tensor on the first tensor's device (0 for none):
    accumulated in float32 (a float16 model's norms would overflow at 65504; float64 tensors in float64, then
    rounded). One fused kernel per device and dtype, as ``clip_grad_norm_`` computes it; no host sync. Shards
    (DTensors, a sharded run) give the norm of the full tensors, reduced over the ranks."""
    if not tensors:
        return torch.zeros((), dtype=torch.float32)
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.device, t.dtype), []).append(t)
    device, norms = tensors[0].device, []
    for (_, dtype), ts in groups.items():
        wide = torch.promote_types(dtype, torch.float32)  # float32, or float64 (no narrowing allowed)
        norms += [n.to(device, torch.float32) for n in torch._foreach_norm(ts, 2.0, dtype=wide)]
    total = torch.linalg.vector_norm(torch.stack(norms))
    return total.full_tensor() if isinstance(total, DTensor) else total  # sharded (FSDP2): over every rank's shard


def update_norms(model: torch.nn.Module) -> tuple[float, float]:
    """(gradient norm, parameter norm) of ``model``'s trainable parameters, in float32, in one host read."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad for p in params if p.grad is not None]
    gnorm, pnorm = float32_norm(grads), float32_norm(params)
    return tuple(torch.stack([gnorm.to(pnorm.device), pnorm]).tolist())  # the check's one sync


def first_non_finite(values: dict[str, float]) -> str | None:
    """The first key of ``values`` (in order) whose value is NaN or infinite, else None."""
    return next((k for k, v in values.items() if not math.isfinite(v)), None)


def largest_weight(model: torch.nn.Module) -> str:
    """Where ``model``'s trainable weights are worst: its first non-finite parameter, else its largest ``|weight|``
    (for the error's text; reads every parameter, so only once a check failed)."""
    worst, name = 0.0, ""
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if not bool(torch.isfinite(p).all()):
            return f"non-finite values in {n}"
        top = float(p.detach().abs().max()) if p.numel() else 0.0
        if top > worst:
            worst, name = top, n
    return f"largest |weight| {worst:.3g}, in {name}"


def likely_settings(settings: ModuleSettings, updates: int) -> list[tuple[str, str]]:
    """(key, advice) of the settings that likely made a run diverge after ``updates`` optimizer steps, most likely
    first: float16 weights (overflow past 65504; AdamW's eps is 0 in float16), the learning rate (once an update
    ran), gradient clipping when it is off."""
    hints = []
    policy, quant, opt = settings.policy, settings.quantization, settings.optimizer
    if policy.dtype == "float16" and not quant.load_in_4bit:
        hints.append(
            ("model.policy.dtype", "model.policy.dtype=float16 overflows past 65504 and rounds AdamW's eps to 0: use "
             "bfloat16 (or float32)")
        )  # fmt: skip
    if quant.load_in_4bit and quant.bnb_4bit_compute_dtype == "float16":
        hints.append(
            ("model.quantization.bnb_4bit_compute_dtype", "model.quantization.bnb_4bit_compute_dtype=float16 "
             "overflows past 65504: use bfloat16")
        )  # fmt: skip
    if updates > 0:
        lr = opt.learning_rate
        hints.append(
            ("model.optimizer.learning_rate", f"model.optimizer.learning_rate={lr:g} is too high: lower it "
             f"(e.g. to {lr / 10:g}; GRPO runs use about 1e-6 for full fine-tuning to a few 1e-4 with LoRA)")
        )  # fmt: skip
        if opt.max_grad_norm == 0:
            hints.append(
                ("model.optimizer.max_grad_norm", "model.optimizer.max_grad_norm=0 leaves the gradient unclipped: "
                 "1.0 bounds each step")
            )  # fmt: skip
    return hints


def last_checkpoint(trainer: Any) -> str | None:
    """The newest checkpoint file the run has: its ModelCheckpoints' ``last_model_path`` and ``best_model_path``
    and the ``.ckpt`` files in their folders, or the checkpoint it resumed from; None when there is none."""
    found: list[str] = []
    for callback in getattr(trainer, "checkpoint_callbacks", []):
        found += [callback.last_model_path, callback.best_model_path]
        folder = Path(callback.dirpath) if callback.dirpath else None
        if folder is not None and folder.is_dir():
            found += [str(p) for p in folder.glob("*.ckpt")]
    found.append(getattr(trainer, "ckpt_path", None) or "")
    files = [Path(p) for p in found if p and Path(p).is_file()]
    return str(max(files, key=lambda p: p.stat().st_mtime)) if files else None


def divergence_error(what: str, when: str, detail: str, settings: ModuleSettings, trainer: Any) -> DivergenceError:
    """The error of a run that diverged: ``what`` went non-finite ``when`` (``detail``: the sentence that says so),
    after ``trainer.global_step`` optimizer steps; names the likely settings and the last checkpoint."""
    step = trainer.global_step
    hints = likely_settings(settings, step)
    advice = "; ".join(text for _, text in hints) or (
        f"the model as loaded (model.policy.model_name_or_path={settings.policy.model_name_or_path!r}) gives "
        "non-finite values before any update: check its weights"
    )
    checkpoint = last_checkpoint(trainer)
    kept = (
        f"Last good checkpoint: {checkpoint} (every step before this one passed this check)."
        if checkpoint
        else "No checkpoint was written before it (a ModelCheckpoint with every_n_train_steps keeps one)."
    )
    message = f"training diverged {when}: {detail}. Likely: {advice}. {kept}"
    return DivergenceError(message, what, step, [key for key, _ in hints], checkpoint)


def check_update(loss: float, model: torch.nn.Module, settings: ModuleSettings, trainer: Any) -> None:
    """Raises :class:`DivergenceError` when the update just made (``trainer.global_step`` optimizer steps done)
    left a non-finite ``loss`` (the global batch's, a host float), gradient norm or parameter norm."""
    gnorm, pnorm = update_norms(model)
    what = first_non_finite({"loss": loss, "gradient norm": gnorm, "parameter norm": pnorm})
    if what is None:
        return
    clip = settings.optimizer.max_grad_norm
    detail = {
        "loss": f"the loss is {loss}",
        "gradient norm": f"the gradient norm is {gnorm} (after clipping at max_grad_norm={clip:g})",
        "parameter norm": f"the parameter norm is {pnorm} in float32 ({largest_weight(model)})",
    }[what]
    raise divergence_error(what, f"at step {trainer.global_step}", detail, settings, trainer)


def rollout_divergence(err: NonFiniteLogitsError, settings: ModuleSettings, trainer: Any) -> DivergenceError:
    """The sampler's non-finite logits, in the rollout after ``trainer.global_step`` optimizer steps, as a
    :class:`DivergenceError` that names the likely settings and the last checkpoint."""
    step = trainer.global_step
    when = f"in the rollout after step {step}" if step else "in the first rollout"
    detail = f"non-finite logits at {err.where}, for {err.rows} of {err.total} {err.unit}"
    return divergence_error("logits", when, detail, settings, trainer)
