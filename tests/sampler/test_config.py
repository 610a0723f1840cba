"""One source of truth for every setting's choices: each ``Literal`` agrees with its implementation, and
``SamplerConfig`` is typed with it (so ``--help`` and the errors list the same names)."""

import typing

import pytest
import torch

from infgrpo.registry import choices
from infgrpo.sampler import SamplerConfig
from infgrpo.sampler.engine.decode_step import (
    ATTENTION_BACKENDS,
    CudaGraphs,
    DecodeAttention,
    DecodeStep,
    DecodeWidth,
    StepSettings,
)
from infgrpo.sampler.engine.slot_pool import SlotPool
from infgrpo.sampler.hf.baselines import BASELINES, Decoder
from infgrpo.sampler.schedule.length_predictor import LengthPrediction, LengthPredictor, Mode
from infgrpo.sampler.schedule.planner import Planner, plan
from infgrpo.sampler.schedule.refill import REFILL_POLICIES, Refill
from tests.helpers import random_model


def test_each_literal_names_exactly_what_its_implementation_provides():
    assert set(choices(Refill)) == set(REFILL_POLICIES)
    assert set(choices(Decoder)) == {"engine", *BASELINES}
    assert set(choices(DecodeAttention)) == set(ATTENTION_BACKENDS)
    assert choices(LengthPrediction) == (*choices(Mode), "none")
    for mode in choices(Mode):
        assert LengthPredictor(mode).mode == mode
    used = {plan([5, 4, 3, 3, 2], 2, name).method for name in choices(Planner) if name != "auto"}
    assert used == {"lpt", "fptas"}
    pool = SlotPool(random_model("llama").config, 2, 128, torch.float32, torch.device("cpu"))
    for graphs in choices(CudaGraphs):  # every name is understood; only 'on' needs a CUDA device
        if graphs == "on":
            with pytest.raises(ValueError, match="needs a CUDA device"):
                DecodeStep(random_model("llama"), pool, StepSettings(1.0, 0, 1.0, 0, graphs))
        else:
            assert not DecodeStep(random_model("llama"), pool, StepSettings(1.0, 0, 1.0, 0, graphs)).use_graph
    busy = {
        w: DecodeStep(random_model("llama"), pool, StepSettings(1.0, 0, 1.0, 0, width=w)).busy_width
        for w in choices(DecodeWidth)
    }
    assert busy == {"pool": False, "busy": True, "auto": True}  # 'auto' is 'busy' off CUDA


def test_sampler_config_fields_are_typed_with_the_literals():
    hints = typing.get_type_hints(SamplerConfig)
    assert hints["decoder"] == Decoder and hints["refill"] == Refill and hints["planner"] == Planner
    assert hints["length_predictor"] == LengthPrediction
    assert hints["cuda_graphs"] == CudaGraphs and hints["decode_attention"] == DecodeAttention
    assert hints["decode_width"] == DecodeWidth
