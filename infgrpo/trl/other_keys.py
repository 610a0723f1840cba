"""The keys of real TRL config files that TRL 1.16's dataclasses lack, in the shape of :mod:`infgrpo.trl.fields`.

    RENAMED["torch_dtype"]               # "dtype": an older name, read as TRL 1.16's field
    OTHER_KEYS["dataset_prompt_column"]  # ("data.prompt_column",): a recipe script's argument
    OTHER_KEYS["num_processes"]          # a launcher key: why it has no key, and what to set instead

Real files carry fields that TRL or transformers renamed or removed, the arguments of recipe repositories' own
scripts beside the ``GRPOConfig`` fields, and launcher keys; TRL's parser ignores what it does not know, and the
converter (:mod:`infgrpo.from_trl`) maps or names each of these.
"""

from __future__ import annotations

from infgrpo.trl.fields import Target
from infgrpo.trl.reasons import (
    DISTRIBUTED,
    LAUNCHER,
    LOGGING,
    PRECISION,
    RECIPE,
    REMOVED,
    VLLM,
)
from infgrpo.trl.recipe_rewards import RECIPE_ARGUMENTS, UNUSED_ARGUMENTS

RENAMED: dict[str, str] = {
    "torch_dtype": "dtype",
    "evaluation_strategy": "eval_strategy",
    "no_cuda": "use_cpu",
    "per_gpu_train_batch_size": "per_device_train_batch_size",
    "per_gpu_eval_batch_size": "per_device_eval_batch_size",
    "push_to_hub_model_id": "hub_model_id",
    "push_to_hub_token": "hub_token",
    "include_inputs_for_metrics": "include_for_metrics",
    "torchdynamo": "torch_compile_backend",
    "xpu_backend": "ddp_backend",
    "use_liger_loss": "use_liger_kernel",
    "wandb_log_unique_prompts": "log_unique_prompts",
    "vllm_guided_decoding_regex": "vllm_structured_outputs_regex",
    "vllm_max_model_len": "vllm_max_model_length",
}
"""Fields of older TRL and transformers releases that TRL 1.16 has under another name: read as that field (the new
name wins where a file gives both)."""

OTHER_GROUPS: tuple[tuple[str, dict[str, Target]], ...] = (
    (
        "Older TRL and transformers fields",
        {
            "max_prompt_length": ("data.max_prompt_length",),
            "warmup_ratio": ("model.optimizer.warmup_steps",),
            "overwrite_output_dir": (
                "removed in transformers 5; infgrpo never overwrites a run: each writes a new version_N folder "
                "under trainer.default_root_dir"
            ),
            "logging_dir": LOGGING,
            "save_safetensors": "removed in transformers 5: infgrpo writes the trained model as safetensors",
            "use_mps_device": "removed in transformers 5: Lightning picks the device (trainer.accelerator: mps)",
            **dict.fromkeys(("fp16_backend", "half_precision_backend", "fp16_opt_level"), PRECISION),
            **dict.fromkeys(("split_batches", "dispatch_batches", "sharded_ddp", "fsdp_min_num_params"), DISTRIBUTED),
            "fsdp_transformer_layer_cls_to_wrap": DISTRIBUTED,
            **dict.fromkeys(
                (
                    "use_ipex",
                    "jit_mode_eval",
                    "tpu_num_cores",
                    "tpu_metrics_debug",
                    "ray_scope",
                    "past_index",
                    "mp_parameters",
                    "include_tokens_per_second",
                    "use_legacy_prediction_loop",
                    "push_to_hub_organization",
                    "gradient_checkpointing_use_reentrant",
                ),
                REMOVED,
            ),
            **dict.fromkeys(("vllm_device", "vllm_dtype", "vllm_enable_prefix_caching", "max_num_seqs"), VLLM),
            "padding_free": "an SFT option: infgrpo packs update micro-batches itself (model.update.token_budget)",
        },
    ),
    (
        "Recipe scripts' arguments",
        {
            "dataset_prompt_column": ("data.prompt_column",),
            "system_prompt": ("data.system_prompt",),
            "dataset_mixture": ("data.mixture", "data.eval_split"),
            "chat_template": (
                "a recipe's own Jinja chat template: infgrpo renders with the tokenizer's template (data.chat_template "
                "switches it); save the template into a local copy of the tokenizer (tokenizer_config.json)"
            ),
            **dict.fromkeys(RECIPE_ARGUMENTS, ("model.rewards.functions",)),
            **UNUSED_ARGUMENTS,
            **dict.fromkeys(
                (
                    "benchmarks",
                    "callbacks",
                    "hub_model_revision",
                    "overwrite_hub_revision",
                    "push_to_hub_revision",
                    "wandb_entity",
                    "wandb_project",
                    "wandb_run_group",
                    "dataset_num_proc",
                ),
                RECIPE,
            ),
        },
    ),
    (
        "Launcher keys",
        dict.fromkeys(
            (
                "num_processes",
                "num_machines",
                "machine_rank",
                "main_process_ip",
                "main_process_port",
                "accelerate_config",
                "config_file",
                "multi_gpu",
                "gpu_ids",
                "mixed_precision",
                "use_deepspeed",
                "deepspeed_config_file",
                "zero_stage",
                "use_fsdp",
                "distributed_type",
                "dynamo_backend",
                "rdzv_backend",
                "same_network",
                "num_cpu_threads_per_process",
            ),
            LAUNCHER,
        ),
    ),
)
"""Keys that real TRL config files hold but TRL 1.16's dataclasses lack: fields older releases had (besides
:data:`RENAMED`), the arguments of recipe repositories' own scripts (open-r1's ``grpo.py`` and its kin) and the
keys of launchers. TRL's parser ignores them; the converter maps or names each."""

OTHER_KEYS: dict[str, Target] = {name: target for _, keys in OTHER_GROUPS for name, target in keys.items()}
"""Every key of :data:`OTHER_GROUPS`: a tuple of infgrpo keys, or why it has none."""
