"""``sampler.stop_token_ids`` outside the model's vocabulary is named with the ids and the vocabulary size: from the
model's config before it loads (the command line), from its embedding when the sampler is built (the Python API)."""

import pytest

from infgrpo import MicroGroupSampler, PolicyConfig, SamplerConfig
from infgrpo.sampler.stop_tokens import check_stop_token_ids
from infgrpo.settings import ConfigError
from infgrpo.training.preflight.model_data import check_stop_tokens_of


def test_an_id_past_the_vocabulary_is_named_with_the_vocabulary_size():
    with pytest.raises(ConfigError, match=r"sampler.stop_token_ids=\[5, 999999\]: 999999 is outside .*vocab_size=100"):
        check_stop_token_ids([5, 999999], 100)
    with pytest.raises(ConfigError, match=r"-1, 100 are outside"):
        check_stop_token_ids([-1, 100], 100)
    check_stop_token_ids([0, 99], 100)
    check_stop_token_ids([999999], None)  # size unknown: left alone


def test_the_tiny_models_config_is_read_without_its_weights():
    with pytest.raises(ConfigError, match=r"model.sampler.stop_token_ids=\[999999\]: .*vocab_size=103"):
        check_stop_tokens_of(PolicyConfig("tiny"), [999999], "model.sampler.stop_token_ids")
    check_stop_tokens_of(PolicyConfig("tiny"), [102])
    check_stop_tokens_of(PolicyConfig("no/such-model"), [999999])  # unreadable: the loading says why


def test_the_sampler_refuses_an_id_its_model_cannot_emit(tiny_model, tokenizer):
    with pytest.raises(ConfigError, match=r"sampler.stop_token_ids=\[999999\]: 999999 is outside"):
        MicroGroupSampler(tiny_model, tokenizer, SamplerConfig(stop_token_ids=[999999]))
