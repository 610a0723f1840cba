"""Turn a TRL ``GRPOConfig`` (TRL 1.16, with its command line's model, dataset and reward arguments) into an infgrpo
config file for ``python -m infgrpo.fit``.

    python -m infgrpo.from_trl trl_config.yaml                    # the infgrpo YAML on stdout, the notes on stderr
    python -m infgrpo.from_trl trl_config.yaml -o infgrpo.yaml    # written to a file, the notes as # comments on top
    python -m infgrpo.fit --config infgrpo.yaml

    from trl import GRPOConfig
    from infgrpo.from_trl import convert
    result = convert(GRPOConfig(output_dir="out", num_generations=16))   # or a mapping: a TRL config file's fields
    result.config["model"]["group_size"]      # 16: the nested infgrpo config, ready for YAML
    result.notes                               # every TRL setting not carried over (and why), every transform
    print(result.yaml())

The input is what ``trl grpo --config trl_config.yaml`` reads: the fields of TRL 1.16's ``GRPOConfig`` (its
``TrainingArguments`` included), ``ModelConfig`` (``model_name_or_path``, ``dtype``, ``use_peft``, ``lora_*``,
4-bit loading), the ``grpo`` script's arguments (``dataset_name``, ``reward_funcs``, ...), ``DatasetMixtureConfig``
and the file's ``env`` block. :data:`TRL_FIELDS` is the one table of where each goes: a tuple of infgrpo's dotted
keys, or the reason it has none; :func:`markdown_table` renders it (``docs/from_trl.md``). A key infgrpo's default
already gives is not written, unless the TRL config set it; TRL's defaults that differ from infgrpo's (the
learning rate, ``loss_type: dapo``, the seed, three epochs, ...) are written out, so the run is TRL's. A field
that is not TRL's stops the conversion, naming it (with the closest TRL name).

TRL's defaults are read from the installed ``trl`` (``pip install "infgrpo[trl]"``: TRL 1.16.0).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import functools
import inspect
import json
import math
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

TRL_VERSION = "1.16.0"
"""The TRL release whose fields :data:`TRL_FIELDS` covers."""

Target = tuple[str, ...] | str
"""Where a TRL field goes: a tuple of infgrpo's dotted keys, or (a ``str``) the reason it has no infgrpo key."""

# Reasons shared by many fields (a field with a reason is named in the notes whenever it is set).
VLLM = "vLLM serving: infgrpo decodes in-process with its slot pool (model.sampler; its memory: rollout_memory)"
ENGINE = (
    "generation engine: infgrpo decodes with its own slot pool (model.sampler.decoder: engine; hf_cb runs "
    "transformers' continuous batching, as a comparison)"
)
DECODING = "decoding option infgrpo's sampler lacks (it has temperature, top_k, top_p and stop_token_ids)"
PEFT = "peft option infgrpo's model.lora lacks (it has r, alpha, dropout and target_modules)"
KERNELS = (
    "compilation and kernels: infgrpo's decode step replays a CUDA graph (model.sampler.cuda_graphs) and its LM head "
    "is chunked (model.update.logit_chunk_tokens)"
)
PRECISION = "precision: infgrpo computes in model.policy.dtype (no autocast, no TF32 switch)"
MEMORY = "memory: infgrpo plans each phase itself (model.sampler.rollout_memory, model.update.update_memory)"
DATA_LOADING = (
    "data loading: infgrpo tokenizes the prompts in memory and draws them in a seeded shuffled order (data.seed); "
    "every column reaches the rewards as metadata"
)
DATASETS = "dataset sources: infgrpo reads one source, data.path (hub id, folder or file); data.train_size caps it"
OPTIMIZER = (
    "optimizer: infgrpo steps torch's AdamW (betas 0.9 and 0.999, eps 1e-8) with the schedules of model.optimizer; "
    "no other optimizer or option"
)
SFT = "supervised fine-tuning option with no role in GRPO"
DISTRIBUTED = (
    "distributed setup: Lightning's trainer.strategy and trainer.devices (ddp, or fsdp2 where TRL shards with FSDP or "
    "ZeRO-3; the data module shards prompts itself)"
)
LOGGING = (
    "logging: Lightning's loggers (trainer.logger; CSV, and TensorBoard when installed) every "
    "trainer.log_every_n_steps steps"
)
COMPLETIONS = "completion tables go to Lightning's loggers and the console (model.logging)"
HUB = "pushing to the Hub: infgrpo writes the trained model to model.output_dir; upload it with `hf upload`"
CHECKPOINTS = (
    "Lightning's checkpoints: written once (rank 0) and atomically; resuming restores the callbacks, the data order "
    "and the random streams exactly"
)
EVALUATION = (
    "transformers' evaluation loop: infgrpo scores one completion per held-out prompt (data.eval_size, "
    "data.eval_batch_size, model.evaluation.temperature)"
)
REFERENCE = "TR-DPO's reference updates: infgrpo's KL reference stays the initial model"
SCRIPT = "a flag of training scripts that the Trainer does not read"

FIELD_GROUPS: tuple[tuple[str, dict[str, Target]], ...] = (
    (
        "Model (ModelConfig)",
        {
            "model_name_or_path": ("model.policy.model_name_or_path",),
            "dtype": ("model.policy.dtype", "model.quantization.bnb_4bit_compute_dtype"),
            "model_revision": "revisions: give model.policy.model_name_or_path a local snapshot folder of it",
            "attn_implementation": "infgrpo loads transformers' default attention (its engine needs sdpa or eager)",
            "use_peft": ("model.lora.r",),
            "lora_r": ("model.lora.r",),
            "lora_alpha": ("model.lora.alpha",),
            "lora_dropout": ("model.lora.dropout",),
            "lora_target_modules": ("model.lora.target_modules",),
            **dict.fromkeys(
                ("lora_target_parameters", "lora_modules_to_save", "lora_task_type", "use_rslora", "use_dora"), PEFT
            ),
            "load_in_8bit": "8-bit loading: infgrpo quantizes base weights to 4 bits only (model.quantization)",
            "load_in_4bit": ("model.quantization.load_in_4bit",),
            "bnb_4bit_quant_type": ("model.quantization.bnb_4bit_quant_type",),
            "use_bnb_nested_quant": ("model.quantization.bnb_4bit_use_double_quant",),
            "bnb_4bit_quant_storage": "bitsandbytes' storage dtype: infgrpo keeps bitsandbytes' default (uint8)",
        },
    ),
    (
        "Model loading and precision",
        {
            "model_init_kwargs": ("model.policy.dtype",),
            "trust_remote_code": "infgrpo loads the architectures transformers ships (no remote code)",
            "router_aux_loss_coef": "Mixture-of-Experts load balancing: infgrpo adds no auxiliary loss",
            "disable_dropout": "dropout stays as the model's config sets it",
            "cast_lm_head_to_fp32": "infgrpo has no float32 LM head option",
            "gradient_checkpointing": ("model.policy.gradient_checkpointing",),
            "activation_checkpointing": ("model.policy.gradient_checkpointing",),
            **dict.fromkeys(
                ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
                "checkpointing options: infgrpo recomputes every layer (model.policy.gradient_checkpointing)",
            ),
            "bf16": ("model.policy.dtype", "model.quantization.bnb_4bit_compute_dtype"),
            "fp16": ("model.policy.dtype", "model.quantization.bnb_4bit_compute_dtype"),
            **dict.fromkeys(("tf32", "bf16_full_eval", "fp16_full_eval"), PRECISION),
            **dict.fromkeys(
                (
                    "torch_compile",
                    "torch_compile_backend",
                    "torch_compile_mode",
                    "use_liger_kernel",
                    "liger_kernel_config",
                ),
                KERNELS,
            ),
            "use_cache": "the rollout keeps its own KV slot pool; the update needs no cache",
            "torch_empty_cache_steps": MEMORY,
        },
    ),
    (
        "Data",
        {
            "dataset_name": ("data.path",),
            "dataset_config": ("data.config_name",),
            "dataset_train_split": ("data.train_split",),
            "dataset_test_split": ("data.eval_split",),
            "chat_template_kwargs": ("data.chat_template_kwargs",),
            "data_seed": ("data.seed",),
            **dict.fromkeys(("dataset_streaming", "datasets", "streaming", "test_split_size"), DATASETS),
            **dict.fromkeys(
                (
                    "shuffle_dataset",
                    "remove_unused_columns",
                    "dataloader_drop_last",
                    "dataloader_num_workers",
                    "dataloader_pin_memory",
                    "dataloader_persistent_workers",
                    "dataloader_prefetch_factor",
                    "dataloader_multiprocessing_context",
                    "dataloader_in_order",
                    "train_sampling_strategy",
                    "length_column_name",
                    "label_names",
                ),
                DATA_LOADING,
            ),
        },
    ),
    (
        "Batch and rollout",
        {
            "num_generations": ("model.group_size",),
            "per_device_train_batch_size": ("data.batch_size",),
            "gradient_accumulation_steps": ("data.batch_size",),
            **dict.fromkeys(
                ("generation_batch_size", "steps_per_generation"),
                "infgrpo samples one rollout per step and updates on all of it (TRL's default, steps_per_generation "
                "= gradient_accumulation_steps); to reuse a rollout: model.update.num_iterations",
            ),
            "auto_find_batch_size": "infgrpo sizes update micro-batches by memory itself (model.update.token_budget)",
            "pad_to_multiple_of": "infgrpo packs update micro-batches by model.update.token_budget",
            "max_completion_length": ("model.sampler.max_new_tokens",),
            "temperature": ("model.sampler.temperature",),
            "top_p": ("model.sampler.top_p",),
            "top_k": ("model.sampler.top_k",),
            **dict.fromkeys(("min_p", "repetition_penalty", "generation_kwargs"), DECODING),
            **dict.fromkeys(
                (
                    "use_vllm",
                    "vllm_mode",
                    "vllm_model_impl",
                    "vllm_enable_sleep_mode",
                    "vllm_structured_outputs_regex",
                    "vllm_server_base_url",
                    "vllm_server_host",
                    "vllm_server_port",
                    "vllm_server_timeout",
                    "vllm_group_port",
                    "vllm_gpu_memory_utilization",
                    "vllm_max_model_length",
                    "vllm_tensor_parallel_size",
                ),
                VLLM,
            ),
            **dict.fromkeys(
                (
                    "use_transformers_continuous_batching",
                    "transformers_continuous_batching_config",
                    "use_transformers_paged",
                    "cache_implementation",
                ),
                ENGINE,
            ),
            "max_tool_calling_iterations": "tool calling: infgrpo samples each completion in one turn, without tools",
        },
    ),
    (
        "Rewards",
        {
            "reward_funcs": ("model.rewards.functions", "model.rewards.accuracy", "model.rewards.on_error"),
            "reward_model_name_or_path": ("model.rewards.functions",),
            "reward_weights": ("model.rewards.functions",),
            "multi_objective_aggregation": (
                "infgrpo sums the weighted rewards, then normalizes (TRL's default, sum_then_normalize)"
            ),
        },
    ),
    (
        "Objective",
        {
            "beta": ("model.objective.beta",),
            "epsilon": ("model.objective.epsilon_low",),
            "epsilon_high": ("model.objective.epsilon_high",),
            "delta": ("model.objective.delta",),
            **{name: (f"model.objective.{name}",) for name in ("sapo_temperature_neg", "sapo_temperature_pos")},
            **{
                name: (f"model.objective.{name}",)
                for name in ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")
            },
            "importance_sampling_level": ("model.objective.importance_sampling_level",),
            "scale_rewards": ("model.objective.scale_rewards",),
            "loss_type": ("model.objective.loss_type",),
            "mask_truncated_completions": ("model.objective.mask_truncated_completions",),
            "top_entropy_quantile": ("model.objective.top_entropy_quantile",),
            "entropy_coef": ("model.objective.entropy_coef",),
            "use_adaptive_entropy": ("model.objective.use_adaptive_entropy",),
            "entropy_coef_min": ("model.objective.entropy_coef_min",),
            "entropy_coef_max": ("model.objective.entropy_coef_max",),
            "entropy_coef_delta": ("model.objective.entropy_coef_delta",),
            "entropy_target": ("model.objective.entropy_target",),
            "off_policy_mask_threshold": ("model.objective.off_policy_mask_threshold",),
            "use_bias_correction_kl": ("model.objective.kl_bias_correction",),
            "vllm_importance_sampling_correction": ("model.objective.rollout_correction",),
            "vllm_importance_sampling_mode": ("model.objective.rollout_correction",),
            "vllm_importance_sampling_clip_max": ("model.objective.rollout_correction_clip_max",),
            "vllm_importance_sampling_cap": ("model.objective.rollout_correction_clip_max",),
            "vllm_importance_sampling_clip_min": ("model.objective.rollout_correction_clip_min",),
            "num_iterations": ("model.update.num_iterations",),
            **dict.fromkeys(("sync_ref_model", "ref_model_mixup_alpha", "ref_model_sync_steps"), REFERENCE),
            **dict.fromkeys(("label_smoothing_factor", "neftune_noise_alpha"), SFT),
            "average_tokens_across_devices": (
                "transformers' loss averaging: infgrpo's normalizers follow model.objective.loss_type (TRL's meanings)"
            ),
        },
    ),
    (
        "Optimizer",
        {
            "learning_rate": ("model.optimizer.learning_rate",),
            "weight_decay": ("model.optimizer.weight_decay",),
            "warmup_steps": ("model.optimizer.warmup_steps",),
            "lr_scheduler_type": ("model.optimizer.lr_scheduler_type", "model.optimizer.warmup_steps"),
            "max_grad_norm": ("model.optimizer.max_grad_norm",),
            **dict.fromkeys(
                (
                    "optim",
                    "optim_args",
                    "optim_target_modules",
                    "adam_beta1",
                    "adam_beta2",
                    "adam_epsilon",
                    "lr_scheduler_kwargs",
                ),
                OPTIMIZER,
            ),
        },
    ),
    (
        "Run length, seed and devices",
        {
            "max_steps": ("trainer.max_steps",),
            "num_train_epochs": ("trainer.max_epochs",),
            "seed": ("seed_everything",),
            "full_determinism": ("trainer.deterministic",),
            "use_cpu": ("trainer.accelerator",),
            **dict.fromkeys(
                (
                    "local_rank",
                    "ddp_find_unused_parameters",
                    "ddp_bucket_cap_mb",
                    "ddp_broadcast_buffers",
                    "ddp_static_graph",
                    "ddp_backend",
                    "ddp_timeout",
                    "fsdp",
                    "fsdp_config",
                    "deepspeed",
                    "ds3_gather_for_generation",
                    "parallelism_config",
                    "accelerator_config",
                    "ignore_bias_buffers",
                ),
                DISTRIBUTED,
            ),
        },
    ),
    (
        "Logging",
        {
            "logging_steps": ("trainer.log_every_n_steps",),
            "log_completions": ("model.logging.log_completions_every_n_steps",),
            "num_completions_to_print": ("model.logging.num_completions_to_log",),
            **dict.fromkeys(
                (
                    "logging_strategy",
                    "logging_first_step",
                    "log_on_each_node",
                    "logging_nan_inf_filter",
                    "include_num_input_tokens_seen",
                    "log_level",
                    "log_level_replica",
                    "disable_tqdm",
                    "skip_memory_metrics",
                    "report_to",
                    "run_name",
                    "project",
                    "trackio_space_id",
                    "trackio_bucket_id",
                    "trackio_static_space_id",
                ),
                LOGGING,
            ),
            **dict.fromkeys(("log_multimodal", "log_unique_prompts", "log_completions_hub_repo"), COMPLETIONS),
        },
    ),
    (
        "Checkpoints and output",
        {
            "output_dir": ("trainer.default_root_dir", "model.output_dir"),
            "save_strategy": ("trainer.callbacks", "trainer.enable_checkpointing"),
            "save_steps": ("trainer.callbacks",),
            "save_total_limit": ("trainer.callbacks",),
            "save_only_model": ("trainer.callbacks",),
            "resume_from_checkpoint": ("ckpt_path",),
            **dict.fromkeys(
                (
                    "save_on_each_node",
                    "enable_jit_checkpoint",
                    "restore_callback_states_from_checkpoint",
                    "ignore_data_skip",
                ),
                CHECKPOINTS,
            ),
            **dict.fromkeys(
                (
                    "push_to_hub",
                    "hub_token",
                    "hub_private_repo",
                    "hub_model_id",
                    "hub_strategy",
                    "hub_always_push",
                    "hub_revision",
                ),
                HUB,
            ),
        },
    ),
    (
        "Evaluation",
        {
            "eval_strategy": ("data.eval_split", "trainer.val_check_interval", "trainer.check_val_every_n_epoch"),
            "eval_steps": ("trainer.val_check_interval",),
            **dict.fromkeys(
                (
                    "num_generations_eval",
                    "per_device_eval_batch_size",
                    "eval_delay",
                    "eval_on_start",
                    "prediction_loss_only",
                    "eval_do_concat_batches",
                    "eval_use_gather_object",
                    "eval_accumulation_steps",
                    "include_for_metrics",
                    "batch_eval_metrics",
                    "load_best_model_at_end",
                    "metric_for_best_model",
                    "greater_is_better",
                ),
                EVALUATION,
            ),
        },
    ),
    (
        "Scripts and debugging",
        {
            **dict.fromkeys(("do_train", "do_eval", "do_predict"), SCRIPT),
            "debug": "transformers' debug features: infgrpo has none of them",
            "env": "environment variables of TRL's config file: set them in the shell that runs python -m infgrpo.fit",
        },
    ),
)
"""The table, grouped as :func:`markdown_table` shows it: each TRL field to its :data:`Target`."""

TRL_FIELDS: dict[str, Target] = {name: target for _, fields in FIELD_GROUPS for name, target in fields.items()}
"""Every field of TRL 1.16's ``GRPOConfig`` (``TrainingArguments`` included), ``ModelConfig``, the ``grpo``
script's arguments and ``DatasetMixtureConfig`` (and a config file's ``env``): a tuple of the infgrpo keys it
sets, or (a ``str``) why it sets none."""

_LORA = "LoRA only when `use_peft` is true: `model.lora.r` = `lora_r`, else 0"
_BATCH = "`per_device_train_batch_size` x `gradient_accumulation_steps` / `num_generations`: prompts per rank a step"
_CHECKPOINTING = "TRL's default is true; `activation_checkpointing` (transformers 5's name) wins"
_CORRECTION = "only with `use_vllm` (TRL corrects vLLM's log-probs only): the mode, else `none`"

HOW: dict[str, str] = {
    "dtype": "the weights' dtype; with 4-bit loading the compute dtype (as TRL); `auto` has no twin",
    "use_peft": _LORA,
    "lora_r": _LORA,
    "lora_alpha": "with LoRA (TRL's default 32 written)",
    "lora_dropout": "with LoRA (TRL's default 0.05 written)",
    "lora_target_modules": "unset (peft's per-architecture default) is not carried over: infgrpo's is `all-linear`",
    "model_init_kwargs": "its `dtype` (or `torch_dtype`) wins over `dtype`, as in TRL's script; other keys: notes",
    "gradient_checkpointing": _CHECKPOINTING,
    "activation_checkpointing": _CHECKPOINTING,
    "bf16": "mixed precision: with LoRA the frozen base in bfloat16 (LoRA weights stay float32); full fine-tuning "
    "stays float32 (no autocast)",
    "fp16": "as `bf16`, in float16",
    "dataset_test_split": "only when `eval_strategy` is not `no`",
    "data_seed": "null: `seed`",
    "per_device_train_batch_size": _BATCH,
    "gradient_accumulation_steps": _BATCH,
    "max_completion_length": "null (no limit) is not carried over: infgrpo needs a bound",
    "reward_funcs": "TRL's names -> `trl.rewards:<name>` (`get_soft_overlong_punishment` called with the script's "
    "1280 and 256), dotted paths -> `module:function`; `accuracy`: TRL's accuracy reward; `on_error: skip` always "
    "(TRL skips a reward that returns None)",
    "reward_model_name_or_path": "the id, first of `functions` (TRL puts the reward model first)",
    "reward_weights": "one per reward, in TRL's order; unset: 1.0 each",
    "epsilon": "the lower clip",
    "epsilon_high": "null: `epsilon`",
    "scale_rewards": "true / false: `group` / `none`",
    "vllm_importance_sampling_correction": _CORRECTION,
    "vllm_importance_sampling_mode": _CORRECTION,
    "vllm_importance_sampling_cap": "deprecated name of `vllm_importance_sampling_clip_max`",
    "warmup_steps": "a float < 1 is a share of `max_steps`",
    "lr_scheduler_type": "`constant_with_warmup` -> `constant`; transformers' `constant` has no warmup; other "
    "schedules: the nearest (notes)",
    "num_train_epochs": "rounded up to whole epochs; `max_steps` > 0 wins (as TRL)",
    "seed": "TRL's default 42 written",
    "full_determinism": "true -> true",
    "use_cpu": "true -> `cpu`",
    "logging_steps": "optimizer steps -> rollouts (/ `num_iterations`)",
    "log_completions": "true: every `trainer.log_every_n_steps` rollouts",
    "num_completions_to_print": "null (all): a step's completions (`data.batch_size` x `model.group_size`)",
    "output_dir": "logs and checkpoints under it; the trained model (or adapter) in it: `model.output_dir: .`",
    "save_strategy": "`steps`: a `ModelCheckpoint` (`save_last`, `save_top_k: -1`) as `configs/*.yaml` have it; "
    "`epoch`: every epoch; `no`: `enable_checkpointing: false`",
    "save_steps": "`every_n_train_steps`, a multiple of `num_iterations`; a float < 1 is a share of `max_steps`",
    "save_total_limit": "1 -> `save_top_k: 1`; larger limits need a monitored metric (notes)",
    "save_only_model": "true -> `save_weights_only: true`",
    "resume_from_checkpoint": "true -> `last`; a TRL checkpoint folder cannot resume an infgrpo run",
    "eval_strategy": "`no`: `data.eval_split: null`; `steps`: every `eval_steps` rollouts; `epoch`: every epoch",
    "eval_steps": "optimizer steps -> rollouts (/ `num_iterations`); unset: `logging_steps`",
}
"""How a mapped field's value is transformed, where it is not copied as is (the table's third column)."""

TRL_REWARDS: dict[str, str] = {
    "accuracy_reward": "trl.rewards:accuracy_reward",
    "reasoning_accuracy_reward": "trl.rewards:reasoning_accuracy_reward",
    "think_format_reward": "trl.rewards:think_format_reward",
    "get_soft_overlong_punishment": (
        "trl.rewards:get_soft_overlong_punishment(max_completion_len=1280, soft_punish_cache=256)"
    ),
}
"""The names TRL's ``grpo`` script resolves itself (its registry, the factory called with the script's arguments),
as infgrpo reward names."""

ACCURACY_REWARDS = ("trl.rewards:accuracy_reward", "trl.rewards:reasoning_accuracy_reward")
"""Rewards that score 1 for a correct answer: the first one of a run is its ``model.rewards.accuracy``."""

LR_SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant", "constant_with_warmup": "constant"}
"""transformers' schedules that infgrpo has (``model.optimizer.lr_scheduler_type``)."""

CHECKPOINT_CALLBACK = "lightning.pytorch.callbacks.ModelCheckpoint"
TOP = ("seed_everything", "trainer", "model", "data", "ckpt_path")
"""The top-level keys of a ``python -m infgrpo.fit`` config that the conversion writes, in order."""


class ConversionError(ValueError):
    """A TRL config that cannot be converted: a field TRL does not have, or a value TRL itself would refuse."""


@dataclasses.dataclass
class Conversion:
    """An infgrpo config converted from TRL's settings, and the notes on what changed on the way."""

    config: dict[str, Any]
    """The nested infgrpo config: ``{"seed_everything": ..., "trainer": {...}, "model": {...}, "data": {...}}``."""
    notes: list[str]
    """Every set TRL field that has no infgrpo key, with the reason, and every transform worth telling."""

    def yaml(self, source: str | None = None) -> str:
        """The config as YAML for ``python -m infgrpo.fit --config``, the notes as ``#`` comments on top."""
        head = f"# infgrpo config converted from TRL {TRL_VERSION}'s GRPOConfig"
        head += f" ({source})" if source else ""
        lines = [head + " by python -m infgrpo.from_trl", "#"]
        for note in self.notes:
            lines += textwrap.wrap(note, 118, initial_indent="# - ", subsequent_indent="#   ", break_on_hyphens=False)
        body = yaml.safe_dump(self.config, sort_keys=False, default_flow_style=False, allow_unicode=True)
        return "\n".join(lines) + "\n" + body


# ---------------------------------------------------------------------------------------------------- TRL's side


@functools.cache
def trl_defaults() -> dict[str, Any]:
    """TRL's default of every field of :data:`TRL_FIELDS` (the dataclass defaults, before ``__post_init__``), and
    the installed TRL's version under ``"__version__"``; a ConversionError when trl is not installed."""
    try:
        import trl
        from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig
        from trl.scripts.grpo import GRPOScriptArguments
    except ImportError as err:
        raise ConversionError(
            f"converting a TRL config needs trl for TRL's defaults: pip install 'trl=={TRL_VERSION}' ({err})"
        ) from err
    defaults: dict[str, Any] = {"env": None, "__version__": trl.__version__}
    for cls in (GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = f.default_factory()
            else:
                defaults[f.name] = None
    return defaults


def plain(value: Any) -> Any:
    """A TRL value as YAML writes it: enums as their value, torch dtypes by name, JSON strings of dict fields
    (TRL's command line passes ``'{"enable_thinking": false}'``) as dicts."""
    if isinstance(value, enum.Enum):
        return value.value
    if type(value).__name__ == "dtype" and str(value).startswith("torch."):
        return str(value).removeprefix("torch.")
    if isinstance(value, str) and value.startswith("{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _same_as_default(value: Any, default: Any) -> bool:
    """``value`` equals ``default``, also for a dataclass built with its defaults (transformers' AcceleratorConfig)."""
    if value == default:
        return True
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and default is None:
        try:
            return value == type(value)()
        except TypeError:
            return False
    return False


EQUIVALENT_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "report_to": ("none", [], ["none"], None),
    "debug": ("", [], None),
    "disable_tqdm": (None, False, True),  # transformers sets it from the log level
    "pad_to_multiple_of": ("auto", None),  # TRL: 128 on Neuron, else None
    "include_num_input_tokens_seen": ("no", False),
    "optim": ("adamw_torch_fused", "adamw_torch"),  # torch's AdamW either way
}
"""Values that mean a field's default (what ``__post_init__`` of transformers or TRL turns the default into)."""

DERIVED_DEFAULTS: dict[str, Callable[[TrlSettings, Any], bool]] = {
    "bf16": lambda trl, v: v in (None, not trl["fp16"]),
    "activation_checkpointing": lambda trl, v: v in (None, trl["gradient_checkpointing"]),
    "do_eval": lambda trl, v: v == (trl["eval_strategy"] != "no"),
    "dataloader_pin_memory": lambda trl, v: v == (not trl["use_cpu"]),
    "steps_per_generation": lambda trl, v: v in (None, trl["gradient_accumulation_steps"]),
    "generation_batch_size": lambda trl, v: (
        v is None
        or (trl.explicit is None and trl["steps_per_generation"] == trl["gradient_accumulation_steps"])
        or v == trl["per_device_train_batch_size"] * trl["gradient_accumulation_steps"]
    ),
}
"""Fields whose default TRL or transformers derive from other fields: ``(settings, value) -> is it the default``."""


class TrlSettings:
    """TRL's settings: the values given over TRL's defaults, and which of them are set (not TRL's default)."""

    def __init__(self, given: Mapping[str, Any], explicit: set[str] | None, defaults: Mapping[str, Any]) -> None:
        self.defaults = defaults
        self.values = {name: plain(value) for name, value in {**defaults, **given}.items()}
        self.explicit = explicit
        """The fields a mapping named; None for a ``GRPOConfig`` object (every field given: set = not default)."""

    def __getitem__(self, name: str) -> Any:
        return self.values.get(name)

    def is_set(self, name: str) -> bool:
        """Whether ``name`` was given with a value other than TRL's default (or what its default becomes)."""
        if self.explicit is not None and name not in self.explicit:
            return False
        value = self.values.get(name)
        if _same_as_default(value, plain(self.defaults.get(name))):
            return False
        if any(value == v and type(value) is type(v) for v in EQUIVALENT_DEFAULTS.get(name, ())):
            return False
        return not (name in DERIVED_DEFAULTS and DERIVED_DEFAULTS[name](self, value))

    def any_set(self, *names: str) -> bool:
        """Whether any of ``names`` is set."""
        return any(self.is_set(name) for name in names)


# ---------------------------------------------------------------------------------------------------- infgrpo's side


@functools.cache
def _children(path: str) -> dict[str, Any]:
    """The keys under ``path`` of a ``python -m infgrpo.fit`` config with their defaults, in their order."""

    def parameters(fn: Callable[..., Any]) -> dict[str, Any]:
        params = inspect.signature(fn).parameters.values()
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return {p.name: p.default for p in params if p.name != "self" and p.kind in kinds}

    if path == "":
        return {"seed_everything": 0, "trainer": None, "model": None, "data": None, "ckpt_path": None}
    if path == "trainer":
        from lightning.pytorch import Trainer

        return parameters(Trainer.__init__)
    if path == "data":
        from infgrpo.data import PromptDataModule

        return parameters(PromptDataModule.__init__)
    if path == "model":
        from infgrpo.module import GRPOModule

        return parameters(GRPOModule.__init__)
    from infgrpo.training.hparams import GROUPS

    section, _, group = path.partition(".")
    if section == "model" and group in GROUPS:
        out = {}
        for f in dataclasses.fields(GROUPS[group]):
            has_factory = f.default_factory is not dataclasses.MISSING
            out[f.name] = f.default_factory() if has_factory else f.default
        return out
    raise KeyError(path)


def infgrpo_default(key: str) -> Any:
    """infgrpo's default of a dotted key (``model.sampler.max_new_tokens`` -> 128); a KeyError for a key that
    ``python -m infgrpo.fit`` does not have (or a group, such as ``model.sampler``)."""
    parent, _, leaf = key.rpartition(".")
    try:
        children = _children(parent)
    except KeyError:
        raise KeyError(key) from None
    if leaf not in children or (parent == "model" and _is_group(leaf)) or (parent == "" and leaf in TOP[1:4]):
        raise KeyError(key)
    return children[leaf]


def _is_group(name: str) -> bool:
    from infgrpo.training.hparams import GROUPS

    return name in GROUPS


def _rank(key: str) -> tuple[int, ...]:
    """Where ``key`` goes in the written config: the order of each level's parameters or fields."""
    parts = key.split(".")
    rank = []
    for i, part in enumerate(parts):
        names = list(_children(".".join(parts[:i])))
        rank.append(names.index(part) if part in names else len(names))
    return tuple(rank)


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys (``model.sampler.temperature``) as nested dicts, in the order of infgrpo's parameters."""
    root: dict[str, Any] = {}
    for key in sorted(flat, key=_rank):
        *parents, leaf = key.split(".")
        node = root
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = flat[key]
    return root


class _Out:
    """The infgrpo keys being written: a key is kept when the TRL config set it or its value is not infgrpo's
    default."""

    def __init__(self) -> None:
        self.flat: dict[str, Any] = {}

    def put(self, key: str, value: Any, given: bool = False) -> None:
        """Writes ``key`` when ``given`` (the TRL config set it) or ``value`` differs from infgrpo's default."""
        default = infgrpo_default(key)  # a KeyError for a key infgrpo lacks, written or not
        if given or value != default:
            self.flat[key] = value

    def get(self, key: str) -> Any:
        """The value written for ``key``, else infgrpo's default."""
        return self.flat[key] if key in self.flat else infgrpo_default(key)


# ---------------------------------------------------------------------------------------------------- transforms

Transform = Callable[[TrlSettings, _Out, list[str]], None]
TRANSFORMS: dict[str, Transform] = {}
"""The mapped fields whose values are not copied as they are, to the function that converts them (each runs once,
in the order they are defined); every other mapped field is copied to its one key."""


def _converts(*names: str) -> Callable[[Transform], Transform]:
    """Registers a transform for ``names`` (fields of :data:`TRL_FIELDS` mapped to infgrpo keys)."""

    def deco(fn: Transform) -> Transform:
        for name in names:
            TRANSFORMS[name] = fn
        return fn

    return deco


def _int(trl: TrlSettings, name: str, least: int = 1) -> int:
    """``trl[name]`` as an integer >= ``least``; a ConversionError naming the field otherwise."""
    value = trl[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < least:
        raise ConversionError(f"{name}={value!r} must be an integer >= {least}")
    return int(value)


def _steps(trl: TrlSettings, name: str, notes: list[str], value: Any = None) -> int | None:
    """``trl[name]`` (or ``value``) in optimizer steps: a float < 1 is transformers' share of ``max_steps`` (None
    when that is unknown)."""
    value = trl[name] if value is None else value
    if isinstance(value, float) and 0 < value < 1:
        max_steps = trl["max_steps"] or -1
        if max_steps <= 0:
            notes.append(f"{name}={value} (a share of the run's steps) needs max_steps > 0: infgrpo's default is kept")
            return None
        steps = math.ceil(max_steps * value)
        notes.append(f"{name}={value} of max_steps={max_steps}: {steps} optimizer steps")
        return steps
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 1:
        raise ConversionError(f"{name}={value!r} must be an integer >= 1 or a share of max_steps in (0, 1)")
    return int(value)


def _dtype_name(value: Any) -> str | None:
    """A dtype given as a string or a torch dtype, by name (``torch.bfloat16`` -> ``bfloat16``)."""
    return None if value is None else str(plain(value)).removeprefix("torch.")


@_converts(
    "model_init_kwargs",
    "dtype",
    "bf16",
    "fp16",
    "use_peft",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "load_in_4bit",
    "bnb_4bit_quant_type",
    "use_bnb_nested_quant",
)
def _policy(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """The weights' dtype (TRL's ``dtype``, ``bf16``/``fp16`` mixed precision), LoRA and 4-bit loading."""
    init_kwargs = dict(trl["model_init_kwargs"] or {})
    given = init_kwargs.pop("dtype", None) or init_kwargs.pop("torch_dtype", None)
    dtype = _dtype_name(given) if given is not None else _dtype_name(trl["dtype"])
    if init_kwargs:
        notes.append(
            f"model_init_kwargs {sorted(init_kwargs)} not mapped: from_pretrained options; infgrpo loads the model "
            "with model.policy's dtype and sdpa attention"
        )
    if dtype == "auto":
        notes.append("dtype=auto (the checkpoint's dtype) has no infgrpo twin: infgrpo loads an explicit dtype")
        dtype = None
    lora = bool(trl["use_peft"])
    four_bit = bool(trl["load_in_4bit"])
    bf16 = not trl["fp16"] if trl["bf16"] is None else trl["bf16"]  # TRL's default: bf16 unless fp16
    mixed = "bfloat16" if bf16 else "float16" if trl["fp16"] else None
    weights = dtype or "float32"
    if weights == "float32" and mixed:
        flag = "bf16" if bf16 else "fp16"
        if lora or four_bit:
            weights = mixed
            notes.append(
                f"{flag}=True (mixed precision) with LoRA: the frozen base computes in {mixed} "
                f"(model.policy.dtype{', quantization.bnb_4bit_compute_dtype' if four_bit else ''}); the LoRA "
                "weights stay float32, as peft keeps them"
            )
        else:
            notes.append(
                f"{flag}=True is mixed precision over float32 weights; infgrpo has no autocast and full fine-tuning "
                f"stays float32 ({mixed} weights round away small updates); model.policy.dtype: {mixed} trades that "
                "for memory"
            )
    dtype_given = given is not None or trl.any_set("dtype", "bf16", "fp16")
    if four_bit:
        out.put("model.quantization.load_in_4bit", True, True)
        out.put("model.quantization.bnb_4bit_compute_dtype", weights, True)  # TRL: BitsAndBytesConfig(dtype)
        out.put("model.quantization.bnb_4bit_quant_type", trl["bnb_4bit_quant_type"], trl.is_set("bnb_4bit_quant_type"))
        out.put("model.quantization.bnb_4bit_use_double_quant", bool(trl["use_bnb_nested_quant"]), True)
        if not lora:
            notes.append("load_in_4bit=True without use_peft: 4-bit base weights need LoRA (set use_peft)")
    else:
        out.put("model.policy.dtype", weights, dtype_given)
    if lora:
        out.put("model.lora.r", _int(trl, "lora_r"), True)
        out.put("model.lora.alpha", trl["lora_alpha"], True)
        out.put("model.lora.dropout", trl["lora_dropout"], True)
        if trl["lora_target_modules"] is None:
            notes.append(
                "lora_target_modules unset: peft's default for the architecture (q_proj and v_proj for most) is not "
                "carried over; model.lora.target_modules stays all-linear (set it to match TRL's run)"
            )
        else:
            out.put("model.lora.target_modules", trl["lora_target_modules"], True)
    elif trl.any_set("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules"):
        notes.append("lora_* set but use_peft is false: no LoRA, as in TRL")


@_converts("gradient_checkpointing", "activation_checkpointing")
def _checkpointing(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """Gradient checkpointing: TRL's default is on (transformers 5 calls it ``activation_checkpointing``)."""
    on = trl["activation_checkpointing"]
    on = trl["gradient_checkpointing"] if on is None else on
    out.put("model.policy.gradient_checkpointing", bool(on), trl.any_set("gradient_checkpointing"))


def _batch_size(trl: TrlSettings) -> int:
    """Prompts per rank a step: ``per_device_train_batch_size x gradient_accumulation_steps / num_generations``."""
    per_rank = _int(trl, "per_device_train_batch_size") * _int(trl, "gradient_accumulation_steps")
    return max(1, round(per_rank / _int(trl, "num_generations", 2)))


@_converts("per_device_train_batch_size", "gradient_accumulation_steps")
def _batch(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """``data.batch_size``: the prompts a rank samples a step (TRL counts completions per device)."""
    device, accumulate = trl["per_device_train_batch_size"], trl["gradient_accumulation_steps"]
    groups = trl["num_generations"]
    size = _batch_size(trl)
    out.put("data.batch_size", size, True)
    per_rank = device * accumulate
    what = (
        f"data.batch_size={size}: per_device_train_batch_size={device} x gradient_accumulation_steps={accumulate} "
        f"= {per_rank} completions per rank a step, / num_generations={groups}: prompts per rank (N ranks sample "
        f"N x {size} prompts a step); the update's micro-batches follow model.update.token_budget"
    )
    if per_rank % groups:
        what += (
            f"; {per_rank} is no multiple of {groups}: TRL spreads a group over ranks, infgrpo keeps each group on "
            f"one rank ({size * groups} completions per rank): set data.batch_size for your number of ranks"
        )
    notes.append(what)


@_converts("max_completion_length")
def _max_new_tokens(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """``model.sampler.max_new_tokens``; TRL's None (no limit) has no twin."""
    if trl["max_completion_length"] is None:
        notes.append("max_completion_length=None (no limit): infgrpo needs a bound; model.sampler.max_new_tokens kept")
        return
    out.put("model.sampler.max_new_tokens", _int(trl, "max_completion_length"), True)


@_converts("reward_funcs", "reward_model_name_or_path", "reward_weights")
def _rewards(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """``model.rewards``: TRL's reward functions (resolved as its ``grpo`` script does) with their weights."""
    names: list[str] = []
    model = trl["reward_model_name_or_path"]
    if model:
        names.append(str(model))
        notes.append(f"reward_model_name_or_path={model!r}: a reward model, first of model.rewards.functions as in TRL")
    funcs = trl["reward_funcs"] or []
    for func in [funcs] if isinstance(funcs, str) else funcs:
        if func in TRL_REWARDS:
            name = TRL_REWARDS[func]
        elif "." in func:  # TRL: a module path and an attribute, split at the last dot
            module, _, attribute = func.rpartition(".")
            name = f"{module}:{attribute}"
        else:
            raise ConversionError(
                f"reward_funcs: {func!r} is neither one of TRL's names ({', '.join(TRL_REWARDS)}) nor a dotted "
                "import path (my_lib.rewards.custom_reward)"
            )
        if name in names:
            raise ConversionError(f"reward_funcs: {func!r} is named twice; give it once, with the sum of its weights")
        names.append(name)
    weights = trl["reward_weights"]
    if names:
        weights = [1.0] * len(names) if weights is None else list(weights)
        if len(weights) != len(names):
            raise ConversionError(
                f"reward_weights has {len(weights)} weights for {len(names)} rewards ({', '.join(names)}): one each"
            )
        out.put("model.rewards.functions", {n: float(w) for n, w in zip(names, weights, strict=True)}, True)
        out.put("model.rewards.accuracy", next((n for n in names if n in ACCURACY_REWARDS), None), True)
    elif weights is not None:
        raise ConversionError(f"reward_weights={weights!r} without reward_funcs or reward_model_name_or_path")
    else:
        notes.append(
            "no reward_funcs: TRL takes them from its grpo script or GRPOTrainer(reward_funcs=...); "
            "model.rewards.functions stays infgrpo's default (synthetic): set it"
        )
    out.put("model.rewards.on_error", "skip", True)
    notes.append(
        "model.rewards.on_error: skip, as TRL 1.16 leaves a reward that returns None out of the sum; a reward that "
        "raises, which stops a TRL run, is skipped too (counted in train/rewards_failed; on_error: raise stops)"
    )


@_converts("epsilon", "epsilon_high", "scale_rewards")
def _clipping(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """TRL's ``epsilon`` is the lower clip; its ``epsilon_high`` None means ``epsilon``; ``scale_rewards`` bools."""
    low, high = trl["epsilon"], trl["epsilon_high"]
    out.put("model.objective.epsilon_low", low, trl.is_set("epsilon"))
    out.put("model.objective.epsilon_high", low if high is None else high, trl.any_set("epsilon", "epsilon_high"))
    scale = trl["scale_rewards"]
    scale = {True: "group", False: "none"}[scale] if isinstance(scale, bool) else scale
    out.put("model.objective.scale_rewards", scale, trl.is_set("scale_rewards"))


@_converts(
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_max",
    "vllm_importance_sampling_cap",
    "vllm_importance_sampling_clip_min",
)
def _rollout_correction(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """TRL corrects the rollout's log-probs with vLLM only: carried over to infgrpo's engine when ``use_vllm``."""
    names = (
        "vllm_importance_sampling_correction",
        "vllm_importance_sampling_mode",
        "vllm_importance_sampling_clip_max",
        "vllm_importance_sampling_cap",
        "vllm_importance_sampling_clip_min",
    )
    if not (trl["use_vllm"] and trl["vllm_importance_sampling_correction"]):
        if trl.any_set(*names):
            notes.append(
                "vllm_importance_sampling_* apply with use_vllm only (TRL corrects vLLM's log-probs): "
                "model.objective.rollout_correction stays none"
            )
        return
    mode = trl["vllm_importance_sampling_mode"]
    cap = trl["vllm_importance_sampling_cap"]
    clip_max = trl["vllm_importance_sampling_clip_max"] if cap is None else cap
    out.put("model.objective.rollout_correction", mode, True)
    out.put("model.objective.rollout_correction_clip_max", clip_max, True)
    out.put("model.objective.rollout_correction_clip_min", trl["vllm_importance_sampling_clip_min"], True)
    notes.append(
        f"use_vllm with vllm_importance_sampling_correction: TRL's correction ({mode}) applies to infgrpo's own "
        "rollout log-probs: model.objective.rollout_correction"
    )


@_converts("warmup_steps", "lr_scheduler_type", "weight_decay")
def _schedule(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """The learning-rate schedule (transformers' names) and its warmup; weight decay."""
    schedule = str(trl["lr_scheduler_type"])
    ours = LR_SCHEDULES.get(schedule) or ("cosine" if schedule.startswith("cosine") else "linear")
    if schedule not in LR_SCHEDULES:
        notes.append(
            f"lr_scheduler_type={schedule!r} is no infgrpo schedule (constant, linear, cosine): {ours} is used"
        )
    out.put("model.optimizer.lr_scheduler_type", ours, trl.is_set("lr_scheduler_type"))
    warmup = _steps(trl, "warmup_steps", notes) if trl["warmup_steps"] else 0
    if warmup and schedule == "constant":
        notes.append(f"warmup_steps={warmup} dropped: transformers' constant schedule has no warmup")
        warmup = 0
    if warmup is not None:
        out.put("model.optimizer.warmup_steps", warmup, trl.is_set("warmup_steps"))
    decay = trl["weight_decay"]
    out.put("model.optimizer.weight_decay", decay, trl.is_set("weight_decay"))
    if decay:
        notes.append(
            f"weight_decay={decay}: transformers leaves biases and LayerNorm weights out of weight decay; infgrpo's "
            "AdamW decays every trained parameter"
        )


@_converts("max_steps", "num_train_epochs")
def _run_length(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """``max_steps`` > 0 ends the run (optimizer steps, as Lightning counts them), else ``num_train_epochs``."""
    max_steps = trl["max_steps"]
    if max_steps is not None and max_steps > 0:
        out.put("trainer.max_steps", _int(trl, "max_steps"), True)
        if trl.is_set("num_train_epochs"):
            notes.append(f"num_train_epochs={trl['num_train_epochs']} ignored: max_steps > 0 ends the run, as in TRL")
        return
    epochs = trl["num_train_epochs"]
    whole = max(1, math.ceil(epochs))
    if whole != epochs:
        notes.append(f"num_train_epochs={epochs}: trainer.max_epochs={whole} (Lightning runs whole epochs)")
    out.put("trainer.max_epochs", whole, True)


@_converts("full_determinism", "use_cpu")
def _switches(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """Deterministic kernels and a CPU run, when TRL asks for them."""
    if trl["full_determinism"]:
        out.put("trainer.deterministic", True, True)
    if trl["use_cpu"]:
        out.put("trainer.accelerator", "cpu", True)


def _per_rollout(trl: TrlSettings, steps: int) -> int:
    """Optimizer steps as rollouts (Lightning's batches): each rollout makes ``num_iterations`` optimizer steps."""
    return max(1, math.ceil(steps / _int(trl, "num_iterations")))


@_converts("logging_steps", "log_completions", "num_completions_to_print")
def _logging(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """How often the metrics and the completion tables are logged (Lightning counts rollouts, TRL optimizer steps)."""
    steps = _steps(trl, "logging_steps", notes)
    every = _per_rollout(trl, steps) if steps is not None else None
    if every is not None:
        out.put("trainer.log_every_n_steps", every, True)
        if every != steps:
            notes.append(
                f"logging_steps={steps} optimizer steps: trainer.log_every_n_steps={every} rollouts (each makes "
                f"num_iterations={trl['num_iterations']} optimizer steps)"
            )
    if trl["log_completions"]:
        out.put("model.logging.log_completions_every_n_steps", every or out.get("trainer.log_every_n_steps") or 50)
        count = trl["num_completions_to_print"]
        if count is None:
            count = out.get("data.batch_size") * out.get("model.group_size")
            notes.append(f"num_completions_to_print=None (all): a step's {count} completions per rank")
        out.put("model.logging.num_completions_to_log", count, True)
    elif trl.is_set("num_completions_to_print"):
        notes.append("num_completions_to_print ignored: log_completions is false")


@_converts("output_dir")
def _output(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """TRL's ``output_dir`` holds the checkpoints and the trained model: the run's root and ``model.output_dir``."""
    root = trl["output_dir"] or "trainer_output"  # transformers' default
    out.put("trainer.default_root_dir", root, True)
    out.put("model.output_dir", ".", True)
    notes.append(
        f"output_dir={root!r}: trainer.default_root_dir (logs and checkpoints in {root}/grpo/version_N/) and "
        "model.output_dir: '.' (relative to the root: the trained model, or LoRA adapter, written into "
        f"{root} itself, as TRL's save_model)"
    )


@_converts("save_strategy", "save_steps", "save_total_limit", "save_only_model")
def _checkpoints(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """Checkpoints: a Lightning ``ModelCheckpoint`` as ``configs/*.yaml`` have it, every ``save_steps`` steps."""
    strategy = trl["save_strategy"]
    if strategy == "no":
        out.put("trainer.enable_checkpointing", False, True)
        notes.append("save_strategy=no: trainer.enable_checkpointing: false (no checkpoints)")
        return
    init: dict[str, Any] = {}
    if strategy == "epoch":
        init["every_n_epochs"] = 1
        where = "every epoch"
    else:
        steps = _steps(trl, "save_steps", notes) or 500
        every = _per_rollout(trl, steps) * _int(trl, "num_iterations")  # Lightning checks after each rollout
        if every != steps:
            notes.append(f"save_steps={steps}: every {every} optimizer steps (a multiple of num_iterations)")
        init["every_n_train_steps"] = every
        where = f"every {every} optimizer steps"
        if strategy == "best":
            notes.append("save_strategy=best needs a monitored metric (ModelCheckpoint's monitor): saved " + where)
    init["save_last"] = True
    limit = trl["save_total_limit"]
    init["save_top_k"] = 1 if limit == 1 else -1
    if limit not in (None, 1):
        notes.append(
            f"save_total_limit={limit}: Lightning's ModelCheckpoint without a monitored metric keeps every "
            "checkpoint (save_top_k: -1) or the newest (1): every one is kept"
        )
    if trl["save_only_model"]:
        init["save_weights_only"] = True
        notes.append("save_only_model=True: save_weights_only (such checkpoints cannot resume a run, as in TRL)")
    out.put("trainer.callbacks", [{"class_path": CHECKPOINT_CALLBACK, "init_args": init}], True)
    notes.append(
        f"checkpoints: a ModelCheckpoint {where} in the run's checkpoints/ folder, with last.ckpt "
        "(resume: --ckpt_path last), as configs/*.yaml have it"
    )


@_converts("resume_from_checkpoint")
def _resume(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """TRL's ``resume_from_checkpoint: true`` (the newest checkpoint of the run) is infgrpo's ``--ckpt_path last``."""
    value = trl["resume_from_checkpoint"]
    if value is True or (isinstance(value, str) and value.lower() == "true"):
        out.put("ckpt_path", "last", True)
        notes.append("resume_from_checkpoint=True: ckpt_path: last (the newest last.ckpt of the run's folder)")
    elif value:
        notes.append(
            f"resume_from_checkpoint={value!r} not mapped: a TRL checkpoint folder cannot resume an infgrpo run "
            "(a Lightning .ckpt can: --ckpt_path)"
        )


@_converts("eval_strategy", "eval_steps", "dataset_test_split")
def _evaluation(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """Held-out evaluation: none unless ``eval_strategy`` asks, then on ``dataset_test_split``."""
    strategy = trl["eval_strategy"]
    if strategy == "no":
        out.put("data.eval_split", None, trl.is_set("dataset_test_split"))
        if trl.any_set("dataset_test_split", "eval_steps"):
            notes.append("dataset_test_split and eval_steps ignored: eval_strategy=no (no held-out evaluation)")
        return
    out.put("data.eval_split", trl["dataset_test_split"], True)
    if strategy == "steps":
        given = trl["eval_steps"] if trl["eval_steps"] is not None else trl["logging_steps"]  # TRL's fallback
        steps = _steps(trl, "eval_steps", notes, given)
        if steps is not None:
            out.put("trainer.val_check_interval", _per_rollout(trl, steps), True)
            out.put("trainer.check_val_every_n_epoch", None, True)  # val_check_interval counts across epochs
    notes.append(
        "held-out evaluation: one completion per prompt of data.eval_split (the first data.eval_size) at "
        "model.evaluation.temperature (0: greedy); TRL's samples num_generations_eval per prompt"
    )


@_converts("dataset_name")
def _dataset(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """``data.path``; TRL 1.16 has no prompt length limit, infgrpo refuses prompts over ``data.max_prompt_length``."""
    if trl["dataset_name"] is None:
        notes.append("no dataset_name: data.path stays infgrpo's default (tiny): set it")
    else:
        out.put("data.path", trl["dataset_name"], True)
    notes.append(
        f"data.max_prompt_length={infgrpo_default('data.max_prompt_length')} (infgrpo's default) bounds the prompts; "
        "TRL 1.16 has no prompt limit: raise it for longer prompts, or set data.long_prompts: skip"
    )


@_converts("model_name_or_path")
def _model_name(trl: TrlSettings, out: _Out, notes: list[str]) -> None:
    """``model.policy.model_name_or_path`` (a ``GRPOConfig`` alone names no model)."""
    if trl["model_name_or_path"] is None:
        notes.append("no model_name_or_path: model.policy.model_name_or_path stays infgrpo's default (tiny): set it")
    else:
        out.put("model.policy.model_name_or_path", trl["model_name_or_path"], True)


# ---------------------------------------------------------------------------------------------------- conversion


def _suggest(name: str) -> str:
    """``" (did you mean 'x'?)"`` for the closest TRL field to ``name``, or ``""``."""
    close = difflib.get_close_matches(name, TRL_FIELDS, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _read(config: Any) -> tuple[dict[str, Any], set[str] | None]:
    """The fields of ``config`` (a ``GRPOConfig`` or other TRL dataclass object, or a mapping of fields), and the
    names a mapping gave (None for an object)."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}, None
    if isinstance(config, Mapping):
        bad = [k for k in config if not isinstance(k, str)]
        if bad:
            raise ConversionError(f"{bad[0]!r} is not a field name (TRL's fields are strings)")
        return dict(config), set(config)
    raise ConversionError(f"expected a trl.GRPOConfig or a mapping of its fields, got {type(config).__name__}")


def convert(config: Any) -> Conversion:
    """The infgrpo config of a TRL ``GRPOConfig`` object, or of a mapping of TRL's fields (a TRL config file: may hold
    ``ModelConfig`` and script fields such as ``model_name_or_path``, ``dataset_name``, ``use_peft``, ``lora_r``,
    ``reward_funcs``), with the notes on what was not carried over and why.

    Raises a :class:`ConversionError` naming a field that is not TRL's (with the closest TRL name), or a value
    TRL would refuse (``reward_weights`` of another length than the rewards).
    """
    given, explicit = _read(config)
    unknown = [name for name in given if name not in TRL_FIELDS]
    if unknown:
        which = ", ".join(f"{name!r}{_suggest(name)}" for name in unknown)
        raise ConversionError(
            f"unknown field{'s' if len(unknown) > 1 else ''} {which}: not a field of TRL {TRL_VERSION}'s GRPOConfig, "
            "ModelConfig or grpo script arguments"
        )
    defaults = trl_defaults()
    trl = TrlSettings(given, explicit, defaults)
    out, notes = _Out(), []
    if defaults["__version__"] != TRL_VERSION:
        notes.append(f"the table is TRL {TRL_VERSION}'s; the installed trl is {defaults['__version__']}")
    for name, target in TRL_FIELDS.items():  # the fields copied as they are
        if isinstance(target, tuple) and name not in TRANSFORMS:
            out.put(target[0], trl[name], trl.is_set(name))
    for transform in dict.fromkeys(TRANSFORMS.values()):
        transform(trl, out, notes)
    for name, reason in TRL_FIELDS.items():
        if isinstance(reason, str) and trl.is_set(name):
            notes.append(f"{name}={_show(trl[name])} not mapped: {reason}")
    return Conversion(nest(out.flat), notes)


def _show(value: Any, width: int = 60) -> str:
    """A short ``repr`` of ``value`` for a note."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def read_trl_file(path: str | Path) -> dict[str, Any]:
    """The fields of a TRL config file: YAML (``trl grpo --config``) or JSON (by its ``.json`` suffix)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConversionError(f"cannot read {path}: {err.strerror or err}") from err
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ConversionError(f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {err}") from err
    if not isinstance(data, dict):
        raise ConversionError(f"{path} must hold a mapping of TRL's fields, not {type(data).__name__}")
    return data


def markdown_table() -> str:
    """:data:`TRL_FIELDS` as a Markdown table, by group; fields with the same target (and :data:`HOW`) share a row."""
    lines = ["| TRL | infgrpo | how |", "|---|---|---|"]
    for title, fields in FIELD_GROUPS:
        lines.append(f"| **{title}** | | |")
        rows: dict[tuple[Target, str], list[str]] = {}
        for name, target in fields.items():
            rows.setdefault((target, HOW.get(name, "")), []).append(name)
        for (target, how), names in rows.items():
            trl = ", ".join(f"`{n}`" for n in names)
            if isinstance(target, str):
                lines.append(f"| {trl} | not mapped | {target} |")
            else:
                lines.append(f"| {trl} | {', '.join(f'`{k}`' for k in target)} | {how} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m infgrpo.from_trl trl_config.yaml [-o infgrpo.yaml]``: the infgrpo YAML on stdout (or in the
    file), the notes on stderr; exits with status 2 and one ``error:`` line for a config it cannot convert."""
    parser = argparse.ArgumentParser(
        prog="python -m infgrpo.from_trl",
        description="Convert a TRL GRPOConfig file (the YAML or JSON of `trl grpo --config`) to a config of "
        "python -m infgrpo.fit; every TRL setting not carried over is named in the notes.",
    )
    parser.add_argument("config", help="TRL config file (YAML, or JSON by its .json suffix)")
    parser.add_argument("-o", "--output", help="write the infgrpo YAML here (default: stdout)")
    args = parser.parse_args(argv)
    try:
        result = convert(read_trl_file(args.config))
    except ConversionError as err:
        parser.error(str(err))
    text = result.yaml(source=Path(args.config).name)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.output:
        print(f"wrote {args.output}: python -m infgrpo.fit --config {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
