"""The data settings' rules that read several fields: where the rows come from, and what holds rows out.

    check_sources_settings({"path": "reasoning_gym:chain_sum", "task_seed": 0, "eval_task_seed": 0})
    # ConfigError: data.eval_task_seed=0 must differ from data.task_seed

:func:`~infgrpo.data.datamodule.check_data_settings` runs these after each field's type is checked against
:class:`~infgrpo.data.datamodule.PromptDataModule`'s signature: on the command line before anything is read or
loaded, and again when the data module is built. Each error names ``data.<field>``, its value and what is valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infgrpo.data.hub_source import check_hub_source
from infgrpo.data.in_memory import dataset_rows
from infgrpo.data.local_files import check_local_source
from infgrpo.data.mixture import DatasetMixture, check_mixture_settings
from infgrpo.data.reasoning_tasks import check_task, is_reasoning_gym
from infgrpo.settings import ConfigError


def check_sources_settings(hp: Mapping[str, Any], mixture: DatasetMixture | None = None) -> None:
    """Raises a :class:`~infgrpo.settings.ConfigError` naming ``data.<field>`` for the first bad value of the data
    settings ``hp`` (their ranges, the sources and the held-out rows; ``mixture`` is ``data.mixture`` read)."""
    in_memory = hp.get("train_dataset") is not None
    for name, least in (("batch_size", 1), ("eval_size", 0), ("eval_batch_size", 1), ("max_prompt_length", 1)):
        if hp.get(name, least) < least:
            raise ConfigError(f"data.{name}={hp[name]} must be >= {least}")
    if hp.get("train_size") is not None and hp["train_size"] < 1:
        raise ConfigError(f"data.train_size={hp['train_size']} must be >= 1 (None = all rows)")
    path, task_config = hp.get("path", "tiny"), hp.get("task_config")
    fraction, eval_path = hp.get("eval_fraction", 0.0), hp.get("eval_path")
    if hp.get("as_conversation") and hp.get("chat_template", True) is False:
        raise ConfigError(
            "data.as_conversation makes the prompts conversations, which only the chat template renders; set "
            "data.chat_template true (or drop data.as_conversation)"
        )
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"data.eval_fraction={fraction} must be in [0, 1) (0 = no training rows held out)")
    if fraction and (eval_path is not None or hp.get("eval_dataset") is not None):
        raise ConfigError(
            f"data.eval_fraction={fraction} and data.eval_path (or eval_dataset) both give held-out rows; set one"
        )
    if eval_path is not None:
        check_local_source(eval_path, [], field="data.eval_path")
        if not Path(eval_path).expanduser().is_file():
            raise ConfigError(f"data.eval_path={eval_path!r} is no data file; give one .jsonl/.json/.csv/.parquet file")
    if mixture is not None:
        check_mixture_settings(mixture, hp)
    elif in_memory:
        dataset_rows(hp["train_dataset"], hp.get("train_split", "train"), "train_dataset")  # a clear error if not
        if task_config is not None:
            raise ConfigError("data.task_config is set, but the data is train_dataset (no reasoning_gym:<task>)")
    elif is_reasoning_gym(path):
        check_task(path, task_config)
        eval_task_seed = hp.get("eval_task_seed")
        if eval_task_seed is not None and eval_task_seed == hp.get("task_seed", 0):
            raise ConfigError(f"data.eval_task_seed={eval_task_seed} must differ from data.task_seed")
    elif task_config is not None:
        raise ConfigError(f"data.task_config is set, but data.path={path!r} is no reasoning_gym:<task> source")
    elif path is None:  # no dataset: placeholder rows an environment fills (the preflight checks the environment)
        if fraction:
            raise ConfigError(
                f"data.eval_fraction={fraction} holds out rows of data.path, which is null (placeholder rows, all "
                "alike); drop it: held-out placeholder rows come with data.eval_split, or give data.eval_path"
            )
    elif path != "tiny":
        eval_split = hp.get("eval_split", "eval") if not fraction and eval_path is None else None
        check_local_source(path, [hp.get("train_split", "train"), *([eval_split] if eval_split else [])])
        if not Path(path).expanduser().exists():
            check_hub_source(path)  # a hub name; offline, a cached one
