"""TRL 1.16's own loss code on given tensors: ``GRPOTrainer._compute_loss`` on a minimal stand-in trainer.

``_compute_loss`` reads a few config fields, an accelerator (gather / reduce / pad across processes) and
the per-token log-probs and entropies from ``_get_per_token_logps_and_entropies``. Here those come from
a one-process accelerator and a stand-in that returns the tensors the test gives, so the loss, its
gradient, TRL's metrics and its adaptive-entropy state are TRL's code run on exactly our inputs. The
default dtype is float64 during the call: TRL builds SAPO's and VESPO's per-row constants with
``torch.where(cond, python_float, python_float)``, which takes the default dtype.
"""

import math
import types
from collections import defaultdict
from types import SimpleNamespace

import torch

from infgrpo.algo import Objective


def grpo_trainer():
    """TRL's ``GRPOTrainer`` class (imported on first use: trl is a test dependency, and a slow import)."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    return GRPOTrainer


class OneProcess:
    """What ``_compute_loss`` uses of accelerate's ``Accelerator``, for a single process."""

    num_processes = 1
    sync_gradients = True

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x

    def gather(self, x):
        return x

    def gather_for_metrics(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x


class TRLLoss:
    """A stand-in ``GRPOTrainer`` configured from an :class:`Objective`; call it once per micro-batch.

    It keeps TRL's adaptive-entropy state (``entropy_coef``, ``_last_world_entropy``) between calls, as
    the trainer does between optimizer steps. ``accumulation``: TRL's gradient accumulation steps (the
    micro-batches of one optimizer step, each of ``per_device_train_batch_size`` rows).
    """

    def __init__(self, obj: Objective, max_completion_length: int, accumulation: int = 1):
        trainer = self.trainer_class = grpo_trainer()
        args = SimpleNamespace(
            use_bias_correction_kl=obj.kl_bias_correction,
            delta=obj.delta,
            sapo_temperature_pos=obj.sapo_temperature_pos,
            sapo_temperature_neg=obj.sapo_temperature_neg,
            vespo_k_pos=obj.vespo_k_pos,
            vespo_lambda_pos=obj.vespo_lambda_pos,
            vespo_k_neg=obj.vespo_k_neg,
            vespo_lambda_neg=obj.vespo_lambda_neg,
            entropy_target=obj.entropy_target,
            entropy_coef_delta=obj.entropy_coef_delta,
            entropy_coef_max=obj.entropy_coef_max,
            entropy_coef_min=obj.entropy_coef_min,
            steps_per_generation=accumulation,
        )
        self.trainer = SimpleNamespace(
            args=args,
            loss_type=obj.loss_type,
            importance_sampling_level=obj.importance_sampling_level,
            epsilon_low=obj.epsilon_low,
            epsilon_high=obj.epsilon_high,
            beta=obj.beta,
            top_entropy_quantile=obj.top_entropy_quantile,
            off_policy_mask_threshold=obj.off_policy_mask_threshold,
            use_vllm=True,  # the rollout engine is a second engine, as vLLM is for TRL
            vllm_importance_sampling_correction=obj.rollout_correction != "none",
            aux_loss_enabled=False,
            max_completion_length=max_completion_length,
            current_gradient_accumulation_steps=accumulation,
            accelerator=OneProcess(),
            model=SimpleNamespace(training=True),
            _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
            entropy_coef=obj.entropy_coef,
            use_adaptive_entropy=obj.use_adaptive_entropy,
            _entropy_bonus_enabled=obj.entropy_coef != 0.0 or obj.use_adaptive_entropy,
            _last_world_entropy=math.inf,
            _entropy_window_stats=None,
            get_off_policy_mask=trainer.get_off_policy_mask,
            get_gamma_weights=trainer.get_gamma_weights,
        )
        self.trainer.get_high_entropy_mask = types.MethodType(trainer.get_high_entropy_mask, self.trainer)

    @property
    def metrics(self) -> dict[str, list[float]]:
        return self.trainer._metrics["train"]

    def __call__(
        self,
        logp,
        entropy,
        advantages,
        mask,
        num_items_in_batch,
        old=None,
        ref=None,
        sampling=None,
        importance_sampling_ratio=None,
        sync_gradients=True,
        tool_mask=None,
    ):
        """TRL's loss of one micro-batch: ``logp``, ``entropy``, ``mask`` (n, C); ``advantages`` (n,);
        ``tool_mask`` (n, C): TRL's ``inputs["tool_mask"]`` of a multi-turn batch (0 on tool-result tokens)."""
        n, c = mask.shape
        self.trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logp, entropy, None)
        self.trainer.accelerator.sync_gradients = sync_gradients
        inputs = {
            "prompt_ids": torch.zeros(n, 1, dtype=torch.long),
            "prompt_mask": torch.ones(n, 1, dtype=torch.long),
            "completion_ids": torch.zeros(n, c, dtype=torch.long),
            "completion_mask": mask,
            "advantages": advantages,
            "num_items_in_batch": torch.tensor(float(num_items_in_batch), dtype=torch.float64),
        }
        for key, value in (
            ("old_per_token_logps", old),
            ("ref_per_token_logps", ref),
            ("sampling_per_token_logps", sampling),
            ("importance_sampling_ratio", importance_sampling_ratio),
            ("tool_mask", tool_mask),
        ):
            if value is not None:
                inputs[key] = value
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            return self.trainer_class._compute_loss(self.trainer, None, inputs)
        finally:
            torch.set_default_dtype(default)


def reference_importance_sampling_ratio(old, sampling, mask, mode, clip_min, clip_max):
    """TRL's ``importance_sampling_ratio`` (``GRPOTrainer._generate_and_score_completions``), recomputed in loops.

    That method also generates and scores, so it cannot run on given tensors; this follows its
    definition element by element in float64: ``d = (old - sampling) * mask`` (NaN -> 0), summed per row
    for ``sequence_*``; ``r = exp(d)``; ``*_truncate`` clamps r to [clip_min, clip_max] (a None bound is
    none); ``*_mask`` sets r outside them to 0. Padding keeps ``exp(0) = 1`` before the bounds apply.
    """
    n, c = mask.shape
    diff = [[(old[i, j].item() - sampling[i, j].item()) * mask[i, j].item() for j in range(c)] for i in range(n)]
    diff = [[0.0 if math.isnan(d) else d for d in row] for row in diff]
    lo = -math.inf if clip_min is None else clip_min
    hi = math.inf if clip_max is None else clip_max

    def bound(r):
        if mode.endswith("truncate"):
            return min(max(r, lo), hi)
        return 0.0 if r < lo or r > hi else r

    if mode.startswith("sequence"):
        return torch.tensor([[bound(math.exp(sum(row)))] for row in diff], dtype=torch.float64)
    return torch.tensor([[bound(math.exp(d)) for d in row] for row in diff], dtype=torch.float64)
