"""num_slots: auto sizes the slot pool from rollout_memory; the K/V it plans is checked against real pools."""

import pytest
import torch

from infgrpo.runtime.memory import budget_bytes, parse_memory
from infgrpo.sampler import MicroGroupSampler, SamplerConfig
from infgrpo.sampler.engine.slot_pool import SlotPool
from infgrpo.sampler.pool_sizing import plan_pool, pool_shape
from tests.helpers import random_model

VOCAB = 1000


@pytest.fixture(scope="module")
def model():
    return random_model("qwen3", vocab=VOCAB)  # 2 layers x 2 KV heads x 16 dims, 4 query heads


@pytest.mark.parametrize(
    "value,expected",
    [(4_000_000_000, 4_000_000_000), ("4GB", 4 * 10**9), ("512MiB", 512 * 2**20), ("1.5 gib", 3 * 2**29)]
    + [(0.5, 0.5), (1.0, 1.0), ("0.25", 0.25), ("123", 123), (4e9, 4_000_000_000)],
)
def test_rollout_memory_takes_bytes_units_or_a_share(value, expected):
    parsed = parse_memory(value, "rollout_memory")
    assert parsed == expected and type(parsed) is type(expected)


@pytest.mark.parametrize("value", [0, -5, 0.0, 1.5, "lots", "4 parsecs", True, None])
def test_bad_rollout_memory_is_a_clear_error(value):
    with pytest.raises(ValueError, match=rf"rollout_memory={value!r} is (not understood|out of range); valid: bytes"):
        SamplerConfig(num_slots="auto", rollout_memory=value)


def test_num_slots_is_a_positive_integer_or_auto():
    assert SamplerConfig(num_slots="auto").num_slots == "auto"
    for bad in (0, "many", 2.0, True):
        with pytest.raises(ValueError, match=rf"num_slots={bad!r} must be an integer >= 1 or 'auto'"):
            SamplerConfig(num_slots=bad)


def test_share_of_free_memory_is_read_from_the_system():
    psutil = pytest.importorskip("psutil")
    free = psutil.virtual_memory().available
    assert abs(budget_bytes(0.5, torch.device("cpu")) - free / 2) < 0.05 * free  # memory moves a little meanwhile


def test_plan_is_the_largest_pool_within_budget_and_its_kv_matches_a_real_pool(model):
    shape = pool_shape(model)
    real = SlotPool(model.config, 3, 40, torch.float32, torch.device("cpu"))
    assert shape.kv_bytes_per_token * 40 * 3 == real.nbytes()  # K/V of 3 slots of 40 positions, allocated
    for budget in (10**6, 3 * 10**6, 10**8):
        plan = plan_pool(budget, shape, max_len=40, prompt_tokens=30)
        assert plan.total_bytes <= budget < plan.total_bytes + plan.slot_bytes
        assert plan.kv_bytes_per_slot == real.nbytes() // 3
        # the decode step's workspace: at least the (S, V) float32 logits and their sampling copies
        assert plan.workspace_bytes_per_slot >= 4 * VOCAB * 4
    more = plan_pool(10**8, shape, max_len=40, prompt_tokens=30, top_p=0.9)
    assert more.workspace_bytes_per_slot > plan.workspace_bytes_per_slot  # top-p sorts the vocabulary


def test_auto_sampler_holds_its_budget_and_draws_the_same_completions(model, capsys):
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16]]
    auto = MicroGroupSampler(model, 2, SamplerConfig(num_slots="auto", rollout_memory=1_000_000, max_new_tokens=20))
    out = auto.sample(prompts, group_size=6, seed=1)
    plan = auto.sizer.plan
    # slots as wide as the engine allocates them: 5 + 20 positions rounded up to 128
    assert plan.max_len == 128 and plan.prompt_kv_bytes == 12 * pool_shape(model).kv_bytes_per_token
    assert 1 < plan.num_slots < 18 and out.stats["num_slots"] == plan.num_slots  # a real limit, not the work
    assert out.stats["kv_bytes_peak"] <= plan.num_slots * plan.kv_bytes_per_slot + plan.prompt_kv_bytes
    assert f"rollout pool: {plan.num_slots} slots x 128 tokens" in capsys.readouterr().out
    fixed = MicroGroupSampler(model, 2, SamplerConfig(num_slots=4, max_new_tokens=20)).sample(prompts, 6, seed=1)
    assert out.completion_ids == fixed.completion_ids  # the slot count never changes the data


def test_budget_too_small_for_one_slot_names_the_setting_and_the_bytes(model):
    sampler = MicroGroupSampler(model, 2, SamplerConfig(num_slots="auto", rollout_memory="20kB", max_new_tokens=20))
    kv = 2 * 2 * 2 * 16 * 4 * 128  # K and V x layers x KV heads x head dim x float32 x (5 + 20 -> 128) positions
    with pytest.raises(ValueError) as err:
        sampler.sample([[5, 6, 7, 8, 9]], group_size=2)
    msg = str(err.value)
    assert msg.startswith("rollout_memory='20kB' gives a budget of 20,000 bytes, too small for one slot")
    assert f"a slot of 128 tokens needs {plan_bytes(model, 128):,} bytes ({kv:,} K/V + " in msg


def plan_bytes(model, max_len: int) -> int:
    plan = plan_pool(10**9, pool_shape(model), max_len=max_len, prompt_tokens=0)
    return plan.slot_bytes


def test_cli_accepts_auto_and_a_budget_string(tmp_path):
    from infgrpo.fit import main

    cli = main(
        [
            *("--trainer.max_steps", "1", "--trainer.accelerator", "cpu", "--trainer.logger", "false"),
            *("--trainer.enable_checkpointing", "false", "--trainer.default_root_dir", str(tmp_path)),
            *("--model.group_size", "2", "--model.sampler.max_new_tokens", "8", "--data.eval_split", "null"),
            *("--model.sampler.num_slots", "auto", "--model.sampler.rollout_memory", "64MB"),
        ]
    )
    assert cli.trainer.global_step == 1
    plan = cli.model.sampler.sizer.plan
    assert plan.budget_bytes == 64 * 10**6 and plan.num_slots >= 1
