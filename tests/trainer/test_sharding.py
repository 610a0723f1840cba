"""The parts of :mod:`infgrpo.trainer.sharding` that need no process group (the 2-rank runs: tests/test_sharded.py)."""

import pytest
import torch

from infgrpo.policy.load import load_policy
from infgrpo.trainer.sharding import decoder_layers, gather_problem, gather_sizes, is_sharded, mixed_precision

GIB = 2**30


def test_decoder_layers_are_the_classes_the_model_names_plain_and_under_lora():
    plain = load_policy("tiny", dtype="float32")
    layers = decoder_layers(plain)
    assert layers == list(plain.model.layers) and len(layers) == plain.config.num_hidden_layers
    adapted = load_policy("tiny", dtype="float32", lora_r=4)
    assert [type(m).__name__ for m in decoder_layers(adapted)] == [type(m).__name__ for m in layers]
    assert not is_sharded(plain) and not is_sharded(adapted)


def test_a_model_that_names_no_layer_class_is_refused():
    with pytest.raises(ValueError, match="names no decoder layer class .* use trainer.strategy: ddp"):
        decoder_layers(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_gradients_reduce_in_the_policy_dtype_as_ddp_does():
    for dtype in (torch.bfloat16, torch.float32, torch.float64):
        policy = mixed_precision(dtype)
        assert policy.param_dtype == dtype and policy.reduce_dtype == dtype


def test_an_unsharded_model_gathers_nothing_more_than_it_holds():
    model = load_policy("tiny", dtype="float32")
    full, held = gather_sizes(model, None)
    assert full == held == sum(p.numel() * 4 for p in model.parameters())


def test_the_gather_check_names_what_to_change_only_when_it_cannot_fit():
    assert gather_problem(16 * GIB, 2 * GIB, free=20 * GIB, total=80 * GIB) is None
    assert gather_problem(16 * GIB, 2 * GIB, free=14 * GIB, total=80 * GIB) is None  # exactly the 14 GiB it adds
    message = gather_problem(16 * GIB, 2 * GIB, free=10 * GIB, total=80 * GIB)
    assert "(16.00 GiB; 14.00 GiB more than this rank's shards), and the device has 10.00 GiB free of 80.00" in message
    assert "more ranks do not lower this" in message and "model.sampler.keep_pool: false" in message


def test_a_sampler_decodes_without_graphs_once_told():
    """A sharded policy's weights are gathered anew each rollout: GRPOModule.configure_model turns graphs off."""
    from infgrpo import MicroGroupSampler, SamplerConfig
    from infgrpo.policy.load import load_tokenizer

    sampler = MicroGroupSampler(load_policy("tiny"), load_tokenizer("tiny"), SamplerConfig(num_slots=2))
    assert sampler.engine.settings.cuda_graphs == "auto"
    sampler.disable_cuda_graphs()
    assert sampler.config.cuda_graphs == "off" and sampler.engine.settings.cuda_graphs == "off"
    assert sampler.engine.pools is sampler.pools  # the kept pool stays the sampler's
