"""The GGUF conversion cache: a cached load equals the direct one; a broken or half folder is never read."""

import json
import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from infgrpo.policy import gguf_cache
from infgrpo.policy.gguf_cache import MANIFEST, cache_folder, cache_root, cached_load, is_complete
from infgrpo.policy.load import from_pretrained, load_policy, load_tokenizer, smollm2_gguf
from tests.test_smollm2 import needs_smollm2


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("INFGRPO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "gguf"


@pytest.fixture
def gguf(tmp_path):
    path = tmp_path / "model.Q4_0.gguf"  # only its path, size and time key the cache here
    path.write_bytes(b"GGUF")
    return path


class Conversions:
    """A stand-in for the GGUF load (the tiny model from its folder), counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return from_pretrained("tiny")


def load(gguf, convert):
    return cached_load(AutoModelForCausalLM, "origin", str(gguf), convert, dtype=torch.float32)


def same_model(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]) for k in sa)


def test_the_first_load_converts_and_writes_later_loads_read_the_folder(cache, gguf):
    convert = Conversions()
    first, second = load(gguf, convert), load(gguf, convert)
    assert convert.calls == 1 and same_model(first, second)
    (folder,) = cache.iterdir()
    assert folder == cache_folder(str(gguf), "model", dtype=torch.float32) and is_complete(folder)
    assert second.name_or_path == second.config._name_or_path == "origin"  # as the direct load names it


@pytest.mark.parametrize("damage", ["truncated", "no manifest", "unloadable"])
def test_a_broken_or_half_folder_is_not_read_but_converted_again(cache, gguf, damage):
    convert = Conversions()
    want = load(gguf, convert)
    folder = cache_folder(str(gguf), "model", dtype=torch.float32)
    weights = folder / "model.safetensors"
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "no manifest":  # what a writer without the atomic rename could leave
        (folder / MANIFEST).unlink()
    else:  # the sizes the manifest lists, but no safetensors header
        weights.write_bytes(b"\0" * weights.stat().st_size)
    assert same_model(load(gguf, convert), want) and convert.calls == 2
    assert is_complete(folder) and same_model(load(gguf, convert), want) and convert.calls == 2
    assert [p.name for p in cache.iterdir()] == [folder.name]  # nothing left aside


def test_a_writer_that_finds_a_complete_folder_keeps_it_and_leaves_no_partial(cache, gguf):
    convert = Conversions()
    load(gguf, convert)
    folder = cache_folder(str(gguf), "model", dtype=torch.float32)
    manifest = (folder / MANIFEST).read_text()
    gguf_cache.write(from_pretrained("tiny"), folder)  # a second writer that converted at the same time
    assert (folder / MANIFEST).read_text() == manifest
    assert [p.name for p in cache.iterdir()] == [folder.name]
    stale = cache / ".partial-killed"
    stale.mkdir()
    os.utime(stale, (0, 0))
    gguf_cache.write(from_pretrained("tiny"), cache / "other")
    assert sorted(p.name for p in cache.iterdir()) == sorted([folder.name, "other"])  # an old partial goes


def test_a_cache_that_cannot_be_written_only_costs_the_conversion(cache, gguf, caplog):
    cache.parent.write_text("a file where the cache folder would be")
    convert = Conversions()
    load(gguf, convert), load(gguf, convert)
    assert convert.calls == 2 and "could not write the GGUF conversion cache" in caplog.text


def test_the_key_holds_the_file_the_keywords_and_the_transformers_version(cache, gguf, monkeypatch):
    base = cache_folder(str(gguf), "model", dtype=torch.float32)
    assert base.parent == cache and base.name.startswith("model.Q4_0-model-")
    assert cache_folder(str(gguf), "model", dtype=torch.bfloat16) != base
    assert cache_folder(str(gguf), "tokenizer") != base
    monkeypatch.setattr(gguf_cache.transformers, "__version__", "0.0.1")
    assert cache_folder(str(gguf), "model", dtype=torch.float32) != base
    monkeypatch.undo()
    monkeypatch.setenv("INFGRPO_CACHE", str(cache.parent))
    os.utime(gguf, ns=(0, 0))
    assert cache_folder(str(gguf), "model", dtype=torch.float32) != base
    assert cache_folder("a-file-of-a-hub-repository.gguf", "model") is None


def test_off_turns_the_cache_off_and_the_default_is_under_the_hugging_face_home(gguf, monkeypatch, tmp_path):
    monkeypatch.setenv("INFGRPO_CACHE", "off")
    convert = Conversions()
    load(gguf, convert), load(gguf, convert)
    assert cache_root() is None and convert.calls == 2
    monkeypatch.delenv("INFGRPO_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HOME", str(tmp_path / "hf"))
    assert cache_root() == tmp_path / "hf" / "infgrpo" / "gguf"


@needs_smollm2
def test_smollm2_from_the_cache_equals_its_direct_gguf_load(cache):
    direct_tok, cached_tok = load_tokenizer("smollm2"), load_tokenizer("smollm2")
    direct, cached = load_policy("smollm2"), load_policy("smollm2")
    assert len(list(cache.iterdir())) == 2  # the model in float32 and the tokenizer
    assert same_model(direct, cached) and type(direct) is type(cached)
    assert dict(direct.named_parameters()).keys() == dict(cached.named_parameters()).keys()
    assert cached.lm_head.weight is cached.model.embed_tokens.weight and cached.config.tie_word_embeddings
    assert direct._tied_weights_keys == cached._tied_weights_keys
    assert direct.config.to_dict() == cached.config.to_dict() and direct.name_or_path == cached.name_or_path
    assert direct.generation_config.to_dict() == cached.generation_config.to_dict()
    text = "<|im_start|>user\n12 + 7 = ? ünïcode 你好 <file_sep><|im_end|>"
    chat = [{"role": "user", "content": "What is 12 + 7?"}]
    for tok in (direct_tok, cached_tok):  # both as load_tokenizer returns them (a pad token set)
        assert tok.special_tokens_map == direct_tok.special_tokens_map and tok.pad_token_id is not None
        assert tok.chat_template == direct_tok.chat_template and tok.get_vocab() == direct_tok.get_vocab()
        assert tok.added_tokens_decoder == direct_tok.added_tokens_decoder
        assert tok.name_or_path == direct_tok.name_or_path
        assert tok(text)["input_ids"] == direct_tok(text)["input_ids"]
        assert tok.apply_chat_template(chat, add_generation_prompt=True) == direct_tok.apply_chat_template(
            chat, add_generation_prompt=True
        )
    lora = load_policy("smollm2", lora_r=4)  # peft on top of the cached load; it names the GGUF's folder
    assert lora.peft_config["default"].base_model_name_or_path == str(smollm2_gguf().parent)
    assert json.loads((cache_folder(str(smollm2_gguf()), "tokenizer") / MANIFEST).read_text())["files"]
