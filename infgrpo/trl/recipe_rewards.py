"""The reasoning recipes' reward registry (open-r1's ``get_reward_funcs``): each name to infgrpo's reward, with the
script arguments it reads.

    recipe_reward("cosine", {"cosine_max_len": 500})
    # ("infgrpo.rewards.open_r1:CosineScaled(min_value_wrong=0.0, ..., max_len=500)", "the recipe's cosine ...")
    recipe_reward("code", {})
    # ("partial(open_r1.rewards:code_reward, num_parallel=2, provider_type='e2b', enforce_same_language=False)", ...)

A recipe's ``grpo.py`` picks its rewards by name from ``reward_funcs`` and builds each one from its script's
arguments (``cosine_max_len``, ``code_language``, ...). The rewards that run in-process have a twin in
:mod:`infgrpo.rewards.open_r1` that gives the recipe's values; ``soft_overlong_punishment`` is TRL's factory, which
computes the recipe's formula. The four that run code in a sandbox service are the recipe's own functions with the
arguments its registry binds (``partial(module:function, ...)``, :mod:`infgrpo.rewards.sources`): they need the
recipe's package where the run starts, and the service named in :attr:`RecipeReward.needs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RECIPE_ARGUMENTS: dict[str, Any] = {
    "cosine_min_value_wrong": 0.0,
    "cosine_max_value_wrong": -0.5,
    "cosine_min_value_correct": 0.5,
    "cosine_max_value_correct": 1.0,
    "cosine_max_len": 1000,
    "repetition_n_grams": 3,
    "repetition_max_penalty": -1.0,
    "max_completion_len": 16384,
    "soft_punish_cache": 4096,
    "code_language": "python",
    "code_eval_test_batch_size": 1,
    "code_eval_scoring_mode": "weighted_sum",
    "parallel_code_exec_per_proc": 2,
    "code_provider": "e2b",
    "ioi_provider": "piston",
    "enforce_same_language": False,
}
"""The recipe script's reward arguments, with its defaults (open-r1's ``GRPOScriptArguments``)."""

UNUSED_ARGUMENTS: dict[str, str] = {
    "e2b_router_url": "the recipe's registry does not bind it to code_reward (its provider reads it from the call's "
    "keywords, which carry the dataset's columns): a run of the recipe ignores it, and so does this one; to send "
    "E2B runs through the router, add e2b_router_url='<url>' to the partial(...) of code or binary_code",
    "morph_router_url": "the recipe's registry does not bind it to code_reward: a run of the recipe ignores it, and "
    "so does this one; to use the router, add morph_router_url='<url>' to the partial(...) of code or binary_code",
}
"""Reward arguments of the recipe's script that its registry passes to no reward: why, and how to use one."""

_SANDBOX = {
    "e2b": "the e2b-code-interpreter package and E2B_API_KEY (E2B's sandboxes)",
    "morph": "the morphcloud package and MORPH_API_KEY (MorphCloud's sandboxes)",
    "piston": "Piston workers listed in PISTON_ENDPOINTS (the recipe's slurm/piston set-up)",
}
_PACKAGE = "the recipe's package importable where python -m infgrpo.fit runs (pip install -e its checkout)"


@dataclass(frozen=True)
class RecipeReward:
    """One name of the recipe's registry: infgrpo's reward for it and what a run needs."""

    reward: str
    """infgrpo's reward name, with ``{argument}`` fields filled from :data:`RECIPE_ARGUMENTS`' keys."""
    default: str | None = None
    """The registered twin that equals :attr:`reward` at the script's defaults (a shorter name), if any."""
    needs: str = ""
    """What the reward needs at run time (a sandbox service, its key, the dataset's columns); "" for a twin."""
    remark: str = ""
    """What a user should know of the twin (said in the conversion's note)."""


RECIPE_REWARDS: dict[str, RecipeReward] = {
    "accuracy": RecipeReward("open_r1_accuracy"),
    "format": RecipeReward("open_r1_format"),
    "tag_count": RecipeReward("open_r1_tag_count"),
    "reasoning_steps": RecipeReward("open_r1_reasoning_steps"),
    "length": RecipeReward(
        "open_r1_length",
        remark="its shortest and longest completion are those of one scoring call: a rank's data.batch_size x "
        "group_size completions a step, TRL's generation batch of a process; under dynamic sampling or adaptive "
        "groups, the group's own",
    ),
    "cosine": RecipeReward(
        "infgrpo.rewards.open_r1:CosineScaled(min_value_wrong={cosine_min_value_wrong}, "
        "max_value_wrong={cosine_max_value_wrong}, min_value_correct={cosine_min_value_correct}, "
        "max_value_correct={cosine_max_value_correct}, max_len={cosine_max_len})",
        "open_r1_cosine",
    ),
    "repetition_penalty": RecipeReward(
        "infgrpo.rewards.open_r1:RepetitionPenalty(ngram_size={repetition_n_grams}, "
        "max_penalty={repetition_max_penalty})",
        "open_r1_repetition_penalty",
    ),
    "code_format": RecipeReward("infgrpo.rewards.open_r1:CodeFormat(language={code_language})", "open_r1_code_format"),
    "soft_overlong_punishment": RecipeReward(
        "trl.rewards:get_soft_overlong_punishment(max_completion_len={max_completion_len}, "
        "soft_punish_cache={soft_punish_cache})"
    ),
    "code": RecipeReward(
        "partial(open_r1.rewards:code_reward, num_parallel={parallel_code_exec_per_proc}, "
        "provider_type={code_provider}, enforce_same_language={enforce_same_language})",
        needs="{package}; for code_provider={code_provider}: {sandbox}; the dataset's verification_info column "
        "(language and test_cases)",
    ),
    "binary_code": RecipeReward(
        "partial(open_r1.rewards:binary_code_reward, num_parallel={parallel_code_exec_per_proc}, "
        "provider_type={code_provider}, enforce_same_language={enforce_same_language})",
        needs="{package}; for code_provider={code_provider}: {sandbox}; the dataset's verification_info column "
        "(language and test_cases)",
    ),
    "ioi_code": RecipeReward(
        "partial(open_r1.rewards:ioi_code_reward, test_batch_size={code_eval_test_batch_size}, "
        "provider_type={ioi_provider})",
        needs="{package}; for ioi_provider={ioi_provider}: {sandbox}; rows shaped as open-r1/ioi's (id and the "
        "problem's test columns)",
    ),
    "cf_code": RecipeReward(
        "partial(open_r1.rewards:cf_code_reward, test_batch_size={code_eval_test_batch_size}, "
        "scoring_mode={code_eval_scoring_mode})",
        needs="{package}; Piston: {piston}; rows shaped as open-r1/codeforces' verifiable-prompts (an optional "
        "language column)",
    ),
}
"""Every name of the recipe's registry (``get_reward_funcs``), to infgrpo's reward."""

ACCURACY_TWINS = ("open_r1_accuracy",)
"""Twins whose value >= 1 is a correct answer (a run's ``model.rewards.accuracy`` when it has one)."""


def arguments(given: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe's reward arguments: each of :data:`RECIPE_ARGUMENTS` as ``given`` sets it (None: the default)."""
    return {k: given[k] if given.get(k) is not None else v for k, v in RECIPE_ARGUMENTS.items()}


def remark(name: str) -> str:
    """What a user should know of the twin of the registry ``name`` ("" for none)."""
    return RECIPE_REWARDS[name].remark


def recipe_reward(name: str, given: Mapping[str, Any]) -> tuple[str, str]:
    """(infgrpo's reward for the registry ``name``, built from the script arguments ``given``; what a run needs, or
    "" for a twin). A KeyError for a name the registry lacks."""
    entry, values = RECIPE_REWARDS[name], arguments(given)
    filled = entry.reward.format(**{k: repr(v) for k, v in values.items()})
    if entry.default is not None and all(values[k] == RECIPE_ARGUMENTS[k] for k in _fields(entry.reward)):
        filled = entry.default
    needs = entry.needs.format(
        package=_PACKAGE,
        sandbox=_SANDBOX.get(str(values["code_provider" if name in ("code", "binary_code") else "ioi_provider"]), "?"),
        piston=_SANDBOX["piston"],
        **values,
    )
    return filled, needs


def readers(argument: str) -> list[str]:
    """The registry names whose reward reads the script argument ``argument``."""
    return [name for name, entry in RECIPE_REWARDS.items() if argument in _fields(entry.reward)]


def _fields(template: str) -> list[str]:
    """The ``{argument}`` names of a template."""
    import string

    return [field for _, field, _, _ in string.Formatter().parse(template) if field]
