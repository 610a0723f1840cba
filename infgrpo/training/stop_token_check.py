"""``model.sampler.stop_token_ids`` checked against the model's vocabulary before the model loads.

    check_stop_tokens_of(PolicyConfig("tiny"), [999999])   # ConfigError: ... vocab_size=103 ...

Only the model's config is read (``AutoConfig``: ``config.json`` or a GGUF file's metadata, no weights), and only
when stop ids are set; the rule is :func:`~infgrpo.sampler.stop_tokens.check_stop_token_ids`.
"""

from __future__ import annotations

from typing import Any

from infgrpo.policy.model_config import load_model_config
from infgrpo.sampler.stop_tokens import FIELD, check_stop_token_ids, config_vocab_size
from infgrpo.settings import ConfigError


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
