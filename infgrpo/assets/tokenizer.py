"""A character-level tokenizer with a Qwen-style chat template, built with ``tokenizers``.

One printable ASCII character is one token, plus the chat markers ``<|im_start|>``, ``<|im_end|>``
(end of a turn, the EOS token), ``<|endoftext|>`` (padding) and the role names as single tokens.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
ROLES = ["system", "user", "assistant"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Returns the tokenizer of the tiny default model (vocabulary of about 100 tokens)."""
    chars = ["\n"] + [chr(c) for c in range(32, 127)]
    vocab = {tok: i for i, tok in enumerate(SPECIAL + ROLES + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIAL)
    tok.add_tokens(ROLES)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        model_max_length=256,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
