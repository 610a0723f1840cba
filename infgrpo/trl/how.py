"""How the TRL fields that are not copied as they are become infgrpo's settings: one line each, for the table.

    HOW["scale_rewards"]      # "true / false: `group` / `none`"
    BATCH                     # TRL's batch fields as data.batch_size: the one explanation

:data:`HOW` is the "how" column of ``docs/from_trl.md``'s table (:func:`~infgrpo.from_trl.markdown_table`), beside
:data:`~infgrpo.trl.fields.FIELD_GROUPS`' keys; each row describes what a transform of :mod:`infgrpo.trl.transforms`
does with the value.
"""

from __future__ import annotations

from infgrpo.trl.recipe_rewards import RECIPE_ARGUMENTS

_LORA = "LoRA only when `use_peft` is true: `model.lora.r` = `lora_r`, else 0"
BATCH = (
    "prompts per rank a step, each sampled model.group_size times: per_device_train_batch_size x "
    "gradient_accumulation_steps / num_generations. TRL 1.16 samples that x num_processes completions a step (its "
    "generation_batch_size) and refuses a count that is no multiple of num_generations: on one GPU a group is never "
    "spread over GPUs (on several it may span them; infgrpo keeps each group on one rank)"
)
"""TRL's batch fields as ``data.batch_size``: the one explanation of the table and of :mod:`infgrpo.trl.names`."""
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
    "test_split_size": "a mixture's held-out rows (a share in (0, 1) or rows): `data.mixture.test_split_size`, "
    "drawn with `data.seed` (TRL's split is unseeded; a recipe's mixture splits with its seed); no evaluation when "
    "`eval_strategy` is `no`: `data.eval_size: 0`; without a mixture: ignored, as TRL's script does",
    "data_seed": "null: `seed`",
    "datasets": "`data.mixture.datasets`: each source's fields as they are (`path`, `name`, `data_dir`, `data_files`, "
    "`split`, `columns`, `fraction`), concatenated in order as TRL's `get_dataset`",
    "dataset_mixture": "a recipe's `{datasets: [{id, config, split, columns, weight}], seed}`: `data.mixture` with "
    "`path`/`name`, each weight (1.0 where unset) and the seed (0): the recipe's shuffles, its rows for its seed",
    "max_prompt_length": "older TRL cut longer prompts from the left; infgrpo refuses them (`data.long_prompts`)",
    "warmup_ratio": "a share of the run's optimizer steps: `ceil(ratio x max_steps)`; without `max_steps`: named with "
    "what to set; `warmup_steps` > 0 wins (as transformers)",
    "per_device_train_batch_size": BATCH,
    "gradient_accumulation_steps": BATCH,
    "max_completion_length": "null (no limit) is not carried over: infgrpo needs a bound",
    "max_tool_calling_iterations": "an integer >= 1; null (no bound) is infgrpo's default too, not written",
    "reward_funcs": "TRL's names -> `trl.rewards:<name>` (`get_soft_overlong_punishment` called with the script's "
    "1280 and 256), dotted paths -> `module:function`; a reasoning recipe's registry names (open-r1's "
    "`get_reward_funcs`): the in-process ones to twins with the recipe's values (`open_r1_accuracy`, "
    "`open_r1_format`, `open_r1_tag_count`, ...), the sandboxed `code`, `binary_code`, `ioi_code`, `cf_code` to "
    "`partial(open_r1.rewards:<function>, <its arguments>)` (the recipe's package and service where it runs); other "
    "names, and paths that do not import from the working folder: one error listing each with what to write",
    "reward_model_name_or_path": "the id, first of `functions` (TRL puts the reward model first)",
    "reward_weights": "one per reward, in TRL's order; unset: 1.0 each",
    **dict.fromkeys(
        RECIPE_ARGUMENTS,
        "an argument of the recipe reward that reads it (`cosine_*`, `repetition_*`, `code_*`, ...), written into "
        "that reward's name (`CosineScaled(max_len=...)`, `partial(..., provider_type=...)`); named when "
        "`reward_funcs` has no reward that reads it",
    ),
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
