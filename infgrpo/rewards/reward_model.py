"""Reward models as reward functions: a sequence-classification model scores each prompt + completion.

TRL's ``GRPOTrainer(reward_funcs="org/reward-model")`` rule, scored in micro-batches of at most
``token_budget`` padded tokens, so the reward model's activations stay the same size whatever the number
of completions (TRL scores all B x G completions in one padded batch)::

    import torch
    from infgrpo.rewards.reward_model import RewardModel, is_reward_model

    assert is_reward_model("Skywork/Skywork-Reward-V2-Qwen3-0.6B")  # its config.json is in the local HF cache
    rm = RewardModel("Skywork/Skywork-Reward-V2-Qwen3-0.6B", token_budget=4096)  # or a local folder
    rm.to("cuda", torch.bfloat16)  # the training module does this with the policy's device and dtype
    rm(prompts=["2 + 2 ="], completions=[" 4"])  # [score], one float per completion
    rm(
        prompts=[[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]],
        completions=[[{"role": "assistant", "content": "4"}]],  # conversational rows: the chat template
    )

The rule (TRL 1.16): the model is ``AutoModelForSequenceClassification.from_pretrained(id, num_labels=1)``
with its own tokenizer (``AutoTokenizer.from_pretrained(id)`` unless one is given); a tokenizer without a pad
token pads with its eos token, and the model's ``pad_token_id`` is set to the tokenizer's (the model reads its
score at the last token that is not the pad token). The text of each row and its score:
:mod:`infgrpo.rewards.reward_scoring`. Here: whether a name is a reward model (:func:`is_reward_model`, from its
``config.json`` alone), why an entry that reads as a folder or hub id is none (:func:`not_a_reward_model`), the
checks of a reward model's files before it loads (:func:`check_reward_model_files`: one label, a tokenizer, a
vocabulary that holds it), its loading, and :class:`RewardModel`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from infgrpo.rewards.reward_scoring import Completion, Prompt, check_token_budget, reward_texts, score_texts
from infgrpo.settings import ConfigError

SEQ_CLS_SUFFIX = "ForSequenceClassification"
"""A reward model's architecture (``config.json``'s ``architectures``) ends with this."""


def _read_config(name: str) -> tuple[dict | None, str]:
    """(``config.json`` of a local folder or a hub id in the local HF cache, or None; where it was looked for)."""
    folder = Path(name)
    if folder.is_dir():
        path = folder / "config.json"
        where = f"folder {str(folder)!r}"
    else:
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(name, "config.json")
        except ValueError:  # not a valid repo id (huggingface_hub's HFValidationError is a ValueError)
            return None, f"{name!r} (neither a folder nor a valid hub id)"
        where = f"hub id {name!r} (local cache)"
        if not isinstance(cached, str):
            return None, where
        path = Path(cached)
    if not path.is_file():
        return None, where
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None, where
    return (config if isinstance(config, dict) else None), where


def _architectures(config: Mapping[str, Any]) -> list[str]:
    archs = config.get("architectures") or []
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def _is_seq_cls(config: Mapping[str, Any]) -> bool:
    return any(arch.endswith(SEQ_CLS_SUFFIX) for arch in _architectures(config))


def is_reward_model(name: str) -> bool:
    """True when ``name`` is a sequence-classification model: a local folder, or a hub id in the local HF cache.

    Reads ``config.json`` only (never the weights, never the network): True when its ``architectures`` has
    an entry ending in ``ForSequenceClassification``. A registry name (``"math"``), an import path
    (``"pkg.module:function"``), a causal LM or a hub id whose config is not cached give False.
    """
    if not isinstance(name, str) or not name:
        return False
    config, _ = _read_config(name)
    return config is not None and _is_seq_cls(config)


WHAT_IT_IS = (
    "a reward model in rewards.functions is the folder, or the hub id in the local Hugging Face cache, of a "
    f"sequence-classification model (config.json's architectures end in {SEQ_CLS_SUFFIX}) with one label and its "
    "tokenizer files"
)
"""What a reward model entry must be, said by every error of an entry that is none."""


PROBE = "hello world"
"""Text every tokenizer with a vocabulary encodes to ids (an empty one, made without tokenizer files, to none)."""


def looks_like_model(name: str) -> bool:
    """Whether ``name`` (no registry name) reads as a folder or a hub id rather than a reward's name or an import
    path: it has a ``/`` or names something on disk."""
    return ":" not in name and ("/" in name or "\\" in name or Path(name).expanduser().exists())


def not_a_reward_model(name: str) -> str | None:
    """Why ``name``, which reads as a folder or hub id (:func:`looks_like_model`), is no reward model, ending with
    :data:`WHAT_IT_IS`; None when it is one, or reads as neither. Reads ``config.json`` only."""
    if not looks_like_model(name) or is_reward_model(name):
        return None
    config, where = _read_config(name)
    path = Path(name)
    if config is not None:
        archs = _architectures(config)
        why = f"{where} is a {', '.join(archs)} model" if archs else f"{where} names no architectures"
    elif path.is_dir():
        why = f"{where} has no readable config.json"
    elif path.exists():
        why = f"{name!r} is a file, not a model's folder"
    elif "neither" in where:
        why = f"{name!r} is no folder (and no valid hub id)"
    else:
        why = (
            f"{name!r} is no folder, and as a hub id its config.json is not in the local Hugging Face cache "
            f"(nothing is downloaded here: huggingface-cli download {name} first)"
        )
    return f"{why}; {WHAT_IT_IS}"


def _labels_problem(config: Mapping[str, Any], where: str) -> str | None:
    """Why the head of ``config`` has other than one label (``id2label``, else ``num_labels``, else transformers'
    default of 2, which a head saved with one label never leaves out); None for one label."""
    labels = config.get("id2label")
    count = len(labels) if isinstance(labels, Mapping) else config.get("num_labels", 2)
    if count == 1:
        return None
    said = "config.json id2label" if isinstance(labels, Mapping) else "no id2label: transformers' default"
    return (
        f"reward model: {where} has a {count}-label head ({said}); a reward model has one label (it is loaded with "
        "num_labels=1 and scores with logits[:, 0]), so its head's weights would not fit"
    )


def check_reward_model_files(name: str) -> None:
    """A ConfigError for the reward model ``name`` (:func:`is_reward_model`) that would fail only once loaded: a head
    of other than one label, no tokenizer that loads from its files, or a tokenizer with more tokens than the
    model's ``vocab_size`` (ids past it index out of the embedding). Reads config.json and the tokenizer's files,
    no weights."""
    config, where = _read_config(name)
    if config is None:
        return
    problem = _labels_problem(config, where)
    if problem:
        raise ConfigError(problem)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
        said = None if tokenizer(PROBE, add_special_tokens=False).input_ids else f"it encodes {PROBE!r} to no ids"
    except Exception as err:  # noqa: BLE001 - whatever transformers says, the files are the problem
        tokenizer, said = None, str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
    if said is not None:  # without its files transformers makes an empty tokenizer, which fails in the scoring
        raise ConfigError(
            f"reward model: {where} has no tokenizer that loads ({said}); a reward model scores with its own "
            "tokenizer: save it beside the model (tokenizer.save_pretrained)"
        )
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
    vocab = text.get("vocab_size")
    if isinstance(vocab, int) and len(tokenizer) > vocab:
        raise ConfigError(
            f"reward model: {where}'s tokenizer has {len(tokenizer)} tokens and its config.json vocab_size={vocab}: "
            f"ids {vocab} and up index past the model's embedding; give the tokenizer the model was trained with, "
            "or resize the model's embeddings (model.resize_token_embeddings) and save it again"
        )


def _check_dtype(dtype: str | torch.dtype | None) -> str | torch.dtype | None:
    """None, ``"auto"``, or a floating torch dtype (given as one or by name, e.g. ``"bfloat16"``)."""
    if dtype is None or dtype == "auto":
        return dtype
    value = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(
            f"reward model: dtype={dtype!r} is not valid; use None, 'auto' or a floating dtype "
            "(torch.float32, 'bfloat16', 'float16', ...)"
        )
    return value


def _load_model(name: str, dtype: str | torch.dtype | None) -> PreTrainedModel:
    """``AutoModelForSequenceClassification.from_pretrained(name, num_labels=1)``, after checking its config."""
    config, where = _read_config(name)
    if config is not None:
        if not _is_seq_cls(config):
            raise ValueError(
                f"reward model: {where} is not a sequence-classification model: its config.json names "
                f"architectures {_architectures(config) or config.get('architectures')}; a reward model must have "
                f"one ending in {SEQ_CLS_SUFFIX!r} (e.g. Qwen3ForSequenceClassification), with one label "
                "(it is loaded as AutoModelForSequenceClassification with num_labels=1)"
            )
        problem = _labels_problem(config, where)
        if problem:
            raise ValueError(problem)
    elif Path(name).is_dir():
        raise ValueError(f"reward model: {where} has no readable config.json; is it a saved model?")
    kwargs: dict[str, Any] = {"num_labels": 1}
    if dtype is not None:
        kwargs["dtype"] = dtype
    try:
        return AutoModelForSequenceClassification.from_pretrained(name, **kwargs)
    except OSError as e:
        raise OSError(
            f"reward model: {name!r} could not be loaded: it is not a local folder, and as a hub id it is not in "
            f"the local Hugging Face cache (or the network is off: HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')})"
            f": {e}"
        ) from e


def _short_name(name_or_path: str) -> str:
    """TRL's name of a reward model in its logs: the last part of its id or folder."""
    return name_or_path.rstrip("/\\").replace("\\", "/").split("/")[-1] or "reward_model"


class RewardModel:
    """A sequence-classification reward model as a reward function: ``rm(prompts, completions) -> list[float]``.

    Args:
        model: a local folder or hub id (offline: from the local HF cache), loaded as
            ``AutoModelForSequenceClassification.from_pretrained(model, num_labels=1)``, or a loaded model.
            It is frozen (``requires_grad_(False)``, eval mode).
        tokenizer: its tokenizer, a folder or hub id; default: the model's own (``config._name_or_path``).
            Without a pad token it pads with its eos token (TRL's rule; the tokenizer is changed in place).
        token_budget: the most padded tokens (rows x longest row) scored in one micro-batch.
        chat_template_kwargs: extra arguments of the chat template, for conversational rows.
        dtype: the model's dtype: None (the loader's default), ``"auto"``, or a floating dtype or its name.

    ``__name__`` is the model's short name (the last part of its id), as TRL names it in its logs; the
    training module calls :meth:`to` with the policy's device and dtype when fitting starts.
    """

    def __init__(
        self,
        model: str | PreTrainedModel,
        tokenizer: str | PreTrainedTokenizerBase | None = None,
        token_budget: int = 4096,
        chat_template_kwargs: dict | None = None,
        dtype: str | torch.dtype | None = None,
    ) -> None:
        self.token_budget = check_token_budget(token_budget)
        dtype = _check_dtype(dtype)
        if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, Mapping):
            raise TypeError(f"reward model: chat_template_kwargs must be a dict, not {chat_template_kwargs!r}")
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        if isinstance(model, str):
            model = _load_model(model, dtype)
        elif isinstance(model, PreTrainedModel):
            if not type(model).__name__.endswith(SEQ_CLS_SUFFIX):
                raise ValueError(
                    f"reward model: a {type(model).__name__} is not a sequence-classification model; a reward model's "
                    f"class ends in {SEQ_CLS_SUFFIX!r} (e.g. Qwen3ForSequenceClassification)"
                )
            if isinstance(dtype, torch.dtype):
                model = model.to(dtype)
        else:
            raise TypeError(
                f"reward model: model must be a folder, a hub id or a PreTrainedModel, not {type(model).__name__}"
            )
        name = getattr(model.config, "_name_or_path", "") or ""
        self.tokenizer = self._tokenizer(tokenizer, name)
        model.config.get_text_config().pad_token_id = self.tokenizer.pad_token_id
        self.model = model.requires_grad_(False).eval()
        self.__name__ = _short_name(name)

    @staticmethod
    def _tokenizer(tokenizer: str | PreTrainedTokenizerBase | None, model_name: str) -> PreTrainedTokenizerBase:
        if tokenizer is None:
            if not model_name:
                raise ValueError(
                    "reward model: the model has no name or folder (config._name_or_path) to load its tokenizer "
                    "from; pass tokenizer="
                )
            tokenizer = model_name
        if isinstance(tokenizer, str):
            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        if not isinstance(tokenizer, PreTrainedTokenizerBase):
            raise TypeError(
                f"reward model: tokenizer must be a folder, a hub id or a tokenizer, not {type(tokenizer).__name__}"
            )
        if tokenizer.pad_token_id is None:
            if tokenizer.eos_token is None:
                raise ValueError(
                    f"reward model: the tokenizer {tokenizer.name_or_path!r} has neither a pad token nor an eos token "
                    "to pad with; set tokenizer.pad_token"
                )
            tokenizer.pad_token = tokenizer.eos_token
        return tokenizer

    def to(self, device: str | torch.device, dtype: str | torch.dtype | None = None) -> RewardModel:
        """Moves the model to ``device`` (and casts it to the floating ``dtype`` if one is given); returns self."""
        if dtype is None:
            self.model.to(device=device)
            return self
        value = _check_dtype(dtype)
        if not isinstance(value, torch.dtype):
            raise ValueError(f"reward model: to(dtype={dtype!r}) needs a floating dtype (e.g. torch.bfloat16)")
        self.model.to(device=device, dtype=value)
        return self

    def __call__(self, prompts: Sequence[Prompt], completions: Sequence[Completion], **kwargs: Any) -> list[float]:
        """One score per completion (TRL's reward-function convention; other keyword arguments are ignored).

        Args:
            prompts: N prompts: strings, or lists of messages.
            completions: N completions: strings, or lists of messages
                (see :func:`~infgrpo.rewards.reward_scoring.reward_texts`).

        Returns:
            N floats, in the order of the rows.
        """
        texts = reward_texts(prompts, completions, self.tokenizer, self.chat_template_kwargs)
        return score_texts(self.model, self.tokenizer, texts, self.token_budget)

    def __repr__(self) -> str:
        return f"RewardModel({self.__name__!r}, token_budget={self.token_budget})"
