"""The field table: every field of TRL 1.16's GRPO settings, to infgrpo's keys or to the reason it has none.

    TRL_FIELDS["num_generations"]        # ("model.group_size",)
    TRL_FIELDS["use_vllm"]               # "vLLM serving: infgrpo decodes in-process with its slot pool ..."
    HOW["scale_rewards"]                 # "true / false: `group` / `none`": how (infgrpo.trl.how) it is transformed

:data:`FIELD_GROUPS` is the one table the converter (:mod:`infgrpo.from_trl`), the table of ``docs/from_trl.md``
(:func:`~infgrpo.from_trl.markdown_table`) and the names check of the command line (:mod:`infgrpo.trl.names`)
read. A new TRL field is one row here: a tuple of the infgrpo keys it sets (copied as it is to its one key,
unless a function of :mod:`infgrpo.trl.transforms` converts it; then :data:`~infgrpo.trl.how.HOW` says how), or
why it has none (a reason of :mod:`infgrpo.trl.reasons`, or a sentence of its own).

Real config files hold more than TRL 1.16's fields: older names, fields older releases had, recipe scripts' arguments
and launcher keys are the rows of the same shape in :mod:`infgrpo.trl.other_keys`.
"""

from __future__ import annotations

from infgrpo.trl.reasons import (
    CHECKPOINTS,
    COMPLETIONS,
    DATA_LOADING,
    DATASETS,
    DECODING,
    DISTRIBUTED,
    ENGINE,
    EVALUATION,
    HUB,
    KERNELS,
    LOGGING,
    MEMORY,
    OPTIMIZER,
    PEFT,
    PRECISION,
    REFERENCE,
    SCRIPT,
    SFT,
    VLLM,
)

TRL_VERSION = "1.16.0"
"""The TRL release whose fields :data:`TRL_FIELDS` covers."""

Target = tuple[str, ...] | str
"""Where a TRL field goes: a tuple of infgrpo's dotted keys, or (a ``str``) the reason it has no infgrpo key."""

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
            "datasets": ("data.mixture", "data.eval_split"),
            "test_split_size": ("data.mixture", "data.eval_size"),
            **dict.fromkeys(("dataset_streaming", "streaming"), DATASETS),
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
            "max_tool_calling_iterations": ("model.agent.max_turns",),
        },
    ),
    (
        "Rewards",
        {
            "reward_funcs": ("model.rewards.functions", "model.rewards.accuracy"),
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
"""The table, grouped as :func:`~infgrpo.from_trl.markdown_table` shows it: each TRL field to its :data:`Target`."""

TRL_FIELDS: dict[str, Target] = {name: target for _, fields in FIELD_GROUPS for name, target in fields.items()}
"""Every field of TRL 1.16's ``GRPOConfig`` (``TrainingArguments`` included), ``ModelConfig``, the ``grpo``
script's arguments and ``DatasetMixtureConfig`` (and a config file's ``env``): a tuple of the infgrpo keys it
sets, or (a ``str``) why it sets none."""


class ConversionError(ValueError):
    """A TRL config that cannot be converted: a field TRL does not have, or a value TRL itself would refuse."""
