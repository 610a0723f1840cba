import pytest

from infgrpo.runtime.hub import hub_offline, is_hub_id


@pytest.mark.parametrize("name", ["gpt2", "openai/gsm8k", "Qwen/Qwen3-0.6B"])
def test_a_name_or_org_name_is_a_hub_id(name):
    assert is_hub_id(name)


@pytest.mark.parametrize("name", ["./data", "/abs/model", "~/model", "a/b/c", "bad name", "org/-x-"])
def test_a_path_or_an_invalid_id_is_no_hub_id(name):
    assert not is_hub_id(name)


def test_a_file_suffix_makes_a_name_a_path():
    assert is_hub_id("org/model.gguf") and not is_hub_id("org/model.gguf", (".gguf",))
    assert not is_hub_id("train.jsonl", (".jsonl", ".csv"))


@pytest.mark.parametrize(("value", "offline"), [("1", True), (" on ", True), ("TRUE", True), ("0", False), ("", False)])
def test_hub_offline_reads_the_variable_as_the_hub_does(monkeypatch, value, offline):
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert hub_offline() is offline
