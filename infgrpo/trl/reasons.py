"""Why a TRL field has no infgrpo key: the reasons many fields of :data:`~infgrpo.trl.fields.FIELD_GROUPS` share.

A field with a reason is named in the conversion's notes whenever the TRL config sets it
(``use_vllm=True not mapped: vLLM serving: ...``). A reason that only one field has is written in its row.
"""

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
DATASETS = (
    "streaming: infgrpo holds the rows in memory, in its seeded order that resumes exactly (data.path, or several "
    "sources in data.mixture); data.train_size caps them"
)
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
LAUNCHER = (
    "a launcher's key (accelerate's or the trl command's), not a training setting: python -m infgrpo.fit starts its "
    "own processes: trainer.devices (GPUs), trainer.num_nodes, trainer.strategy (ddp, fsdp2)"
)
RECIPE = "an argument of the recipe's own training script (not TRL's), which infgrpo's trainer has no use for"
REMOVED = "removed from transformers' TrainingArguments before TRL 1.16, with no role in infgrpo"
