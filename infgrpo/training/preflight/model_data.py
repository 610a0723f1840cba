"""The command line's checks that read more than the settings, run before the model loads: the model and the data.

    check_before_loading(config, settings, tokenizer)   # a step of preflight.door's STEPS; ConfigError names the field
    check_stop_tokens_of(PolicyConfig("tiny"), [999999])   # ConfigError: ... vocab_size=103 ...

:func:`~infgrpo.training.hparams.check_settings` and :func:`~infgrpo.data.datamodule.check_data_settings` check
each setting by itself. Some settings are only wrong for the model or the data they meet; Lightning, peft, the
sampler or the data module found those after the model loaded (a traceback, seconds to minutes in). Here they
are found from what costs little to read: the trainer's ``max_steps`` (:func:`check_max_steps`, a step of its own,
which the Python API runs too), the model's config (no weights; a model built on the ``meta`` device for the LoRA
targets), and the first rows of the data with the tokenizer (:mod:`infgrpo.data.first_rows`). The Python API
checks where the objects are used (as fit starts, every prompt against the context by the same rule,
:func:`~infgrpo.sampler.model_support.context_overflow`; see :data:`~infgrpo.training.preflight.door.STEPS`).

Reward models in ``rewards.functions`` are checked from their files (:func:`check_reward_models`: one label, a
tokenizer that loads, a vocabulary that holds it), where they failed once loaded, after the policy.

``model.sampler.stop_token_ids`` are checked against the model's vocabulary (:func:`check_stop_tokens_of`): only
the model's config is read (``AutoConfig``: ``config.json`` or a GGUF file's metadata, no weights), and only when
stop ids are set; the rule is :func:`~infgrpo.sampler.stop_tokens.check_stop_token_ids`. A vision-language model
with a baseline decoder (token ids only) is :func:`~infgrpo.vision.checks.check_decoder`'s line, from its config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from transformers import PretrainedConfig, PreTrainedTokenizerBase

from infgrpo.agent import AgentConfig
from infgrpo.data.first_rows import check_first_rows, split_rows
from infgrpo.data.images import image_root
from infgrpo.data.prompt_rows import row_prompt
from infgrpo.data.vision_prompts import first_rows_image_tokens
from infgrpo.policy.lora_targets import check_lora_targets
from infgrpo.policy.model_config import load_model_config
from infgrpo.rewards.core import REWARDS
from infgrpo.rewards.reward_model import check_reward_model_files
from infgrpo.rewards.signature import check_reward_data
from infgrpo.rewards.sources import is_model_source
from infgrpo.sampler.model_support import context_overflow, sequence_positions
from infgrpo.sampler.stop_tokens import FIELD, check_stop_token_ids, config_vocab_size
from infgrpo.settings import ConfigError
from infgrpo.training.agent_rollout import AgentRollout
from infgrpo.training.hparams import ModuleSettings
from infgrpo.vision.checks import check_decoder


def check_max_steps(max_steps: Any) -> None:
    """Raises a ConfigError unless ``trainer.max_steps`` is -1 (no limit: ``max_epochs`` ends the run) or >= 1.

    Lightning refuses values below -1 only once the trainer is built (after the model), and takes 0, which
    loads the model and trains nothing (and, with ``model.output_dir``, writes the untrained model): refused too.
    """
    if max_steps is None or max_steps == -1:
        return
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        why = " (0 trains nothing)" if max_steps == 0 else ""
        raise ConfigError(
            f"trainer.max_steps={max_steps!r}{why} must be -1 (no limit: max_epochs ends the run) or >= 1"
        )


def check_warmup(optimizer: Any, max_steps: Any) -> None:
    """A ConfigError naming ``model.optimizer.warmup_steps`` and ``trainer.max_steps`` when a decaying schedule
    (``linear``, ``cosine``) has no step left after its warmup: the run's optimizer steps (``max_steps``, Lightning
    counts optimizer steps) must exceed the warmup. The schedule refuses it when it is built, after the model
    loaded (:func:`~infgrpo.training.optim.lr_factor`); with ``max_steps`` -1 the epochs set the length, which the
    rows decide: left to it."""
    schedule, warmup = optimizer.lr_scheduler_type, optimizer.warmup_steps
    if schedule == "constant" or not isinstance(max_steps, int) or max_steps < 1 or max_steps > warmup:
        return
    raise ConfigError(
        f"model.optimizer.warmup_steps={warmup} leaves none of trainer.max_steps={max_steps} optimizer steps to "
        f"lr_scheduler_type={schedule!r}, which decays the rate after the warmup: set warmup_steps below {max_steps} "
        "(e.g. a tenth of the run), raise trainer.max_steps, or use lr_scheduler_type: constant"
    )


def check_context(
    config: PretrainedConfig,
    max_new_tokens: int,
    prompts: list[tuple[str, int, int]],
    image_tokens: Callable[[str, int], int] | None = None,
) -> None:
    """Raises a ConfigError naming ``model.sampler.max_new_tokens`` when the longest of ``prompts`` ((split, row,
    tokens), read before loading) cannot take that many new tokens in the model's context (without prompts: when
    even a one-token prompt cannot), or naming the prompt settings when that prompt alone leaves no room for a
    completion (``data.max_prompt_length``, ``data.system_prompt``, the model; with images, ``image_tokens(split,
    row)`` of them, asked only then: ``data.processor_kwargs``, the pixels)."""
    split, row, tokens = max(prompts, key=lambda p: p[2]) if prompts else (None, 0, 1)
    reason = context_overflow(config, tokens, max_new_tokens)
    if reason is None:
        return
    which = f"row {row} of split {split!r} has {tokens} tokens" if split is not None else "a prompt of 1 token"
    images = image_tokens(split, row) if image_tokens is not None and split is not None else 0
    if images:  # the pixels decide most of such a prompt: their setting first
        which += f", {images} of them for its images (lower their pixels with data.processor_kwargs, e.g. " + (
            "{max_pixels: ...} for Qwen-VL, {size: {longest_edge: ...}} for SmolVLM)"
        )
    positions = sequence_positions(config) or 0
    if tokens >= positions:  # the prompt alone: no max_new_tokens fits, the prompts must shrink
        room = positions - max_new_tokens
        bound = (
            f"set data.max_prompt_length: {room} with data.long_prompts: skip (longer prompts left out)"
            if room >= 1
            else f"lower model.sampler.max_new_tokens below {positions}, then data.max_prompt_length to the rest"
        )
        raise ConfigError(
            f"the prompts are too long for the model: {which}; with max_new_tokens={max_new_tokens} {reason} To fit: "
            f"{bound}, shorten data.system_prompt (it is in every prompt), or give model.policy.model_name_or_path a "
            "model with a longer context"
        )
    raise ConfigError(
        f"model.sampler.max_new_tokens={max_new_tokens} does not fit the model's context: {which}; with "
        f"max_new_tokens={max_new_tokens} {reason}"
    )


def check_before_loading(
    config: Any, settings: ModuleSettings, tokenizer: Callable[[], PreTrainedTokenizerBase]
) -> None:
    """The checks of the module docstring but ``max_steps``, on the parsed ``config`` (data) and the checked
    ``settings``, with the policy's ``tokenizer()`` (asked only when the data's rows are read); the first failure is
    a ConfigError naming ``model.<group>.<field>`` or ``data.<field>``."""
    policy = settings.policy
    model_config = load_model_config(policy.model_name_or_path, policy.gguf_file)
    check_decoder(model_config, settings.sampler.decoder)  # a vision-language model decodes on the engine only
    check_lora_targets(model_config, settings.lora)
    data = config["data"]
    data = data.as_dict() if hasattr(data, "as_dict") else dict(data)
    agent = check_agent_template(settings.agent, tokenizer()) if settings.agent.enabled else None
    tools = (agent.schemas, agent.template) if agent is not None else (None, None)
    prompts = check_first_rows(data, tokenizer, *tools)  # with model.agent: rendered with the tool schemas
    check_context(
        model_config,
        settings.sampler.max_new_tokens,
        prompts,
        lambda split, i: row_image_tokens(data, split, i, *tools),
    )
    if data.get("train_dataset") is None:
        check_reward_splits(settings.rewards.functions, data)


def row_image_tokens(
    data: Mapping[str, Any],
    split: str,
    index: int,
    tools: Callable[[dict], list[dict]] | None = None,
    template: str | None = None,
) -> int:
    """The image tokens of row ``index`` of ``split`` of the data settings ``data`` as its model's processor renders
    them (0 for a row without images), with the agent's ``tools`` and ``template`` as the first rows were rendered:
    what a message about a prompt too long says of its pixels."""
    where = split_rows(data, index + 1).get(split)
    rows = where[1] if where is not None else None
    if not rows or len(rows) <= index:
        return 0
    _, prompt = row_prompt(rows[index], data, split, index)
    root = image_root(data["path"]) if data.get("path") else None
    schemas = [tools(rows[index])] if tools is not None else None
    measured = first_rows_image_tokens(dict(data), split, [rows[index]], [prompt], root, schemas, template)
    return measured[0][1] if measured and measured[0] else 0


def check_agent_template(agent: AgentConfig, tokenizer: PreTrainedTokenizerBase) -> AgentRollout:
    """The run's :class:`~infgrpo.training.agent_rollout.AgentRollout` (its template and tool schemas: the first
    rows are measured with them), or a ConfigError naming ``model.agent.chat_template`` unless the agent's template
    renders a tool exchange and infgrpo can parse the calls it writes; ``GRPOModule`` builds the same after the
    tokenizer loads and before the model does."""
    try:
        return AgentRollout(agent, tokenizer)
    except ConfigError as err:
        raise ConfigError(f"model.{err}") from err


def check_reward_splits(functions: dict[str, float], data: dict[str, Any]) -> None:
    """The first rows of the training and held-out splits of local ``data`` against what ``functions`` read (the
    columns TRL-convention rewards name, ``accuracy_reward``'s ``solution``; conversational completions): a
    ConfigError naming the reward and the data (:func:`~infgrpo.rewards.signature.check_reward_data`)."""
    for split, (where, rows) in split_rows(data).items():
        if rows:
            pairs = [row_prompt(row, data, split, i) for i, row in enumerate(rows)]  # rows as the rewards get them
            check_reward_data(functions, [row for row, _ in pairs], [prompt for _, prompt in pairs], where)


def check_reward_models(functions: Mapping[str, float]) -> None:
    """:func:`~infgrpo.rewards.reward_model.check_reward_model_files` for each reward model among ``functions``
    (``rewards.functions``): its head, tokenizer and vocabulary from its files (no weights), before it loads (on
    the command line, before the policy loads too)."""
    for name in functions:
        if is_model_source(name, REWARDS):
            check_reward_model_files(name)


def check_stop_tokens_of(policy: Any, stop_token_ids: list[int], field: str = FIELD) -> None:
    """:func:`check_stop_token_ids` against the config of the model of ``policy`` (a
    :class:`~infgrpo.policy.config.PolicyConfig`; ``AutoConfig``: no weights are read), read
    only when ``stop_token_ids`` is not empty; a config that cannot be read is left to the loading to report."""
    if not stop_token_ids:
        return
    try:
        config = load_model_config(policy.model_name_or_path, policy.gguf_file)
    except ConfigError:
        return
    check_stop_token_ids(stop_token_ids, config_vocab_size(config), field)
