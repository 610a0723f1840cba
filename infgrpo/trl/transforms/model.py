"""The transforms of the model's settings: the policy's dtype, LoRA and 4-bit loading, the batch, the completion
length, the rewards and the objective's clipping and rollout correction.

Each function converts the TRL fields it is registered for (:meth:`~.registry.Transforms.converts`) and runs once,
in the order they stand here; :mod:`infgrpo.trl.transforms` runs this module's before those of
:mod:`~infgrpo.trl.transforms.run`.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import math
import os
import sys
from typing import Any

from infgrpo.trl.fields import ConversionError
from infgrpo.trl.keys import Keys
from infgrpo.trl.recipe_rewards import ACCURACY_TWINS, RECIPE_ARGUMENTS, RECIPE_REWARDS, readers, recipe_reward, remark
from infgrpo.trl.transforms.registry import Transforms
from infgrpo.trl.trl_settings import TrlSettings, plain

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

ACCURACY_REWARDS = ("trl.rewards:accuracy_reward", "trl.rewards:reasoning_accuracy_reward", *ACCURACY_TWINS)
"""Rewards that score 1 for a correct answer: the first one of a run is its ``model.rewards.accuracy``."""


TRANSFORMS = Transforms()
"""This module's transforms by TRL field."""


def _dtype_name(value: Any) -> str | None:
    """A dtype given as a string or a torch dtype, by name (``torch.bfloat16`` -> ``bfloat16``)."""
    return None if value is None else str(plain(value)).removeprefix("torch.")


@TRANSFORMS.converts(
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
def _policy(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
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
                f"stays float32 ({mixed} weights round away small updates)"
                + (
                    "; model.policy.dtype: bfloat16 trades that for memory"
                    if bf16
                    else "; float16 full fine-tuning is "
                    "refused (AdamW's update overflows float16): model.policy.dtype: bfloat16 trades float32 for memory"
                )
            )
    if weights == "float16" and not lora:
        notes.append(
            "dtype=float16 without use_peft: infgrpo refuses float16 full fine-tuning before the model loads (AdamW's "
            "update rounds its eps to 0 and overflows float16); set use_peft, or dtype: bfloat16"
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
        out.put("model.lora.r", trl.integer("lora_r"), True)
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


@TRANSFORMS.converts("gradient_checkpointing", "activation_checkpointing")
def _checkpointing(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """Gradient checkpointing: TRL's default is on (transformers 5 calls it ``activation_checkpointing``)."""
    on = trl["activation_checkpointing"]
    on = trl["gradient_checkpointing"] if on is None else on
    out.put("model.policy.gradient_checkpointing", bool(on), trl.any_set("gradient_checkpointing"))


def _batch_size(trl: TrlSettings) -> int:
    """Prompts per rank a step: ``per_device_train_batch_size x gradient_accumulation_steps / num_generations``."""
    per_rank = trl.integer("per_device_train_batch_size") * trl.integer("gradient_accumulation_steps")
    return max(1, round(per_rank / trl.integer("num_generations", 2)))


@TRANSFORMS.converts("per_device_train_batch_size", "gradient_accumulation_steps")
def _batch(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
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
    if per_rank % groups:  # TRL 1.16: generation_batch_size = per_rank x num_processes, a multiple of groups
        gpus = groups // math.gcd(per_rank, groups)
        prompts = gpus * per_rank // groups
        what += (
            f"; {per_rank} is no multiple of num_generations={groups}, which TRL 1.16 refuses on one GPU (its "
            f"generation_batch_size, {per_rank} x the GPUs, must be one): TRL runs it on a multiple of {gpus} GPUs "
            f"only, where a group spans GPUs ({prompts} prompt{'s' * (prompts > 1)} a step on {gpus}); infgrpo keeps "
            f"each group on one rank ({size * groups} completions per rank): set data.batch_size so that ranks x "
            "data.batch_size is TRL's prompts a step"
        )
    notes.append(what)


@TRANSFORMS.converts("max_completion_length")
def _max_new_tokens(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """``model.sampler.max_new_tokens``; TRL's None (no limit) has no twin."""
    if trl["max_completion_length"] is None:
        notes.append("max_completion_length=None (no limit): infgrpo needs a bound; model.sampler.max_new_tokens kept")
        return
    out.put("model.sampler.max_new_tokens", trl.integer("max_completion_length"), True)


@TRANSFORMS.converts("max_tool_calling_iterations")
def _tool_turns(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """TRL's bound on an agent's tool-calling turns is ``model.agent.max_turns``; TRL's None (no bound) is infgrpo's
    default too, so it is not written."""
    if trl["max_tool_calling_iterations"] is None:
        return
    turns = trl.integer("max_tool_calling_iterations", 0)
    if turns == 0:
        notes.append(
            "max_tool_calling_iterations=0 not mapped: TRL then parses tool calls and runs none; model.agent.max_turns "
            "takes an integer >= 1 or null (no bound)"
        )
        return
    out.put("model.agent.max_turns", turns, True)


def _reward_name(trl: TrlSettings, func: str, notes: list[str]) -> str | None:
    """infgrpo's name of a reward of ``reward_funcs``: TRL's script's names, an import path (``module:function``, or
    dotted as TRL takes it), a reasoning recipe's registry name (:mod:`infgrpo.trl.recipe_rewards`, with a note);
    None for a name that resolves to nothing."""
    if func in TRL_REWARDS:
        return TRL_REWARDS[func]
    if ":" in func:  # infgrpo's own form
        return func
    if "." in func:  # TRL: a module path and an attribute, split at the last dot
        module, _, attribute = func.rpartition(".")
        return f"{module}:{attribute}"
    if func not in RECIPE_REWARDS:
        return None
    name, needs = recipe_reward(func, {k: trl[k] for k in RECIPE_ARGUMENTS})
    if needs:
        notes.append(
            f"reward_funcs {func!r} (a reasoning recipe's registry name) runs code in a sandbox service: {name}, the "
            f"recipe's function with the arguments its registry binds (not called until scoring); it needs {needs}"
        )
    else:
        more = f"; {remark(func)}" if remark(func) else ""
        notes.append(f"reward_funcs {func!r} (a reasoning recipe's registry name): {name}, the recipe's values{more}")
    return name


def _import_problem(func: str, name: str, notes: list[str]) -> str | None:
    """Why the reward ``name`` (``module:function``, of ``reward_funcs``' ``func``) does not import with the working
    folder first on ``sys.path``, as TRL's script and ``python -m infgrpo.fit`` import it, and what to write; None
    when it imports, or when its package is not found here (a note: fit imports it where it runs)."""
    module, _, attribute = name.partition("(")[0].partition(":")
    package = module.partition(".")[0]
    sys.path.insert(0, os.getcwd())
    try:
        importlib.invalidate_caches()  # files written since the last import of this process
        if importlib.util.find_spec(package) is None:
            notes.append(
                f"reward_funcs {func!r}: {package} is not importable from this folder, so {name} is unchecked; "
                "python -m infgrpo.fit imports it as the run starts (start it where it imports, or set PYTHONPATH)"
            )
            return None
        found = importlib.import_module(module)
    except Exception as err:  # noqa: BLE001 - the user's module: its error says what is wrong
        return f"importing {module} raised {type(err).__name__}: {' '.join(str(err).split())}"
    finally:
        sys.path.remove(os.getcwd())
    target = getattr(found, attribute, None)
    if callable(target):
        return None
    functions = module_functions(found)
    if target is not None:
        return f"{module}.{attribute} is not callable ({type(target).__name__}): name one of {', '.join(functions)}"
    close = difflib.get_close_matches(attribute, functions, n=1)
    instead = f"write '{module}:{close[0]}'" if close else f"its functions: {', '.join(functions) or 'none'}"
    return f"{module} has no {attribute!r}: {instead}"


def _bad_rewards(unknown: list[str], broken: dict[str, str]) -> str:
    """The one line for every reward of ``reward_funcs`` that resolves to nothing (``unknown`` names; ``broken``:
    import paths, each with why it does not import), each with what to write instead."""
    installed = trl_reward_functions()

    def instead(name: str) -> str:
        twin = next((n for n in (name, f"{name}_reward", f"get_{name}_reward") if n in installed), None)
        if twin is None:
            return f"the recipe function's import path, e.g. 'my_recipe.rewards:{name}_reward'"
        return f"'trl.rewards:{twin}{'(<its arguments>)' if twin.startswith('get_') else ''}'"

    parts = []
    if unknown:
        each = "; ".join(f"{f!r} -> {instead(f)}" for f in unknown)
        parts.append(
            f"{', '.join(map(repr, unknown))} {'are' if len(unknown) > 1 else 'is'} neither TRL's names "
            f"({', '.join(TRL_REWARDS)}) nor import paths, nor a reasoning recipe's name infgrpo has a twin of "
            f"({', '.join(RECIPE_REWARDS)}): write {each} (module:function, or module.function as TRL takes it); "
            f"the installed trl.rewards has {', '.join(installed)} ('trl.rewards:<name>')"
        )
    parts += [f"{func!r} does not import from this folder: {why}" for func, why in broken.items()]
    return "reward_funcs: " + "; ".join(parts)


def module_functions(module: Any) -> list[str]:
    """The public functions of ``module`` (its ``__all__``, for lazy modules such as ``trl.rewards``), sorted."""
    names = getattr(module, "__all__", None) or dir(module)
    return sorted(n for n in names if not n.startswith("_") and inspect.isfunction(getattr(module, n, None)))


def trl_reward_functions() -> list[str]:
    """The reward functions (and factories) of the installed ``trl.rewards``."""
    import trl.rewards

    return module_functions(trl.rewards)


@TRANSFORMS.converts("reward_funcs", "reward_model_name_or_path", "reward_weights", *RECIPE_ARGUMENTS)
def _rewards(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """``model.rewards``: TRL's reward functions (resolved as its ``grpo`` script does) with their weights."""
    names: list[str] = []
    model = trl["reward_model_name_or_path"]
    if model:
        names.append(str(model))
        notes.append(f"reward_model_name_or_path={model!r}: a reward model, first of model.rewards.functions as in TRL")
    funcs = trl["reward_funcs"] or []
    unknown, broken = [], {}
    for func in map(str, [funcs] if isinstance(funcs, str) else funcs):
        name = _reward_name(trl, func, notes)
        if name is None:
            unknown.append(func)
        elif name in names:
            raise ConversionError(f"reward_funcs: {func!r} is named twice; give it once, with the sum of its weights")
        else:
            names.append(name)
            problem = _import_problem(func, name, notes) if ":" in func or "." in func else None  # an import path
            if problem:
                broken[func] = problem
    if unknown or broken:
        raise ConversionError(_bad_rewards(unknown, broken))
    named = [str(f) for f in ([funcs] if isinstance(funcs, str) else funcs)]
    for argument in RECIPE_ARGUMENTS:
        if trl.is_set(argument) and not set(readers(argument)) & set(named):
            notes.append(
                f"{argument}={trl[argument]!r} not used: an argument of the recipe's {' and '.join(readers(argument))} "
                "reward, which reward_funcs does not name"
            )
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


@TRANSFORMS.converts("epsilon", "epsilon_high", "scale_rewards")
def _clipping(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """TRL's ``epsilon`` is the lower clip; its ``epsilon_high`` None means ``epsilon``; ``scale_rewards`` bools."""
    low, high = trl["epsilon"], trl["epsilon_high"]
    out.put("model.objective.epsilon_low", low, trl.is_set("epsilon"))
    out.put("model.objective.epsilon_high", low if high is None else high, trl.any_set("epsilon", "epsilon_high"))
    scale = trl["scale_rewards"]
    scale = {True: "group", False: "none"}[scale] if isinstance(scale, bool) else scale
    out.put("model.objective.scale_rewards", scale, trl.is_set("scale_rewards"))


CORRECTION_FIELDS = (
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_max",
    "vllm_importance_sampling_cap",
    "vllm_importance_sampling_clip_min",
)
"""TRL's fields of its correction of vLLM's rollout log-probs."""


@TRANSFORMS.converts(*CORRECTION_FIELDS)
def _rollout_correction(trl: TrlSettings, out: Keys, notes: list[str]) -> None:
    """TRL corrects the rollout's log-probs with vLLM only: carried over to infgrpo's engine when ``use_vllm``."""
    if not (trl["use_vllm"] and trl["vllm_importance_sampling_correction"]):
        if trl.any_set(*CORRECTION_FIELDS):
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
