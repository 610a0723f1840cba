"""The decode step and its pool, unit by unit on the CPU: K/V writes, the mask, the state's named operations,
and the model fingerprint that decides when a CUDA graph is recaptured.

References: a plain HF forward over the whole sequence (float64), hand-built masks, and the definition
of the counter-based uniform.
"""

import torch

from infgrpo.sampler.engine.counter_rng import counter_uniform
from infgrpo.sampler.engine.decode_step import DecodeStep, StepSettings, model_fingerprint
from infgrpo.sampler.engine.slot_pool import SlotPool
from tests.helpers import random_model


def pool_and_step(model, num_slots=3, max_len=128, temperature=0.0):
    pool = SlotPool(model.config, num_slots, max_len, torch.float64, torch.device("cpu"))
    return pool, DecodeStep(model, pool, StepSettings(temperature, 0, 1.0, pad_id=0))


def prompt_kv(model, prompt):
    """(2, layers, kv_heads, L, head_dim) K/V of ``prompt`` from a plain forward (the reference prefill)."""
    cache = model(input_ids=torch.tensor([prompt]), use_cache=True).cache
    return torch.stack(
        [
            torch.stack([layer.keys[0] for layer in cache.layers]),
            torch.stack([layer.values[0] for layer in cache.layers]),
        ]
    )


def test_the_mask_opens_exactly_zero_to_position_and_the_write_index_points_there():
    pool = SlotPool(random_model("llama").config, 3, 128, torch.float32, torch.device("cpu"))
    positions = torch.tensor([[7], [0], [127]])
    mask = pool.prepare_step(positions)
    assert mask.shape == (3, 1, 1, 128) and mask.dtype == torch.float32
    closed = torch.finfo(torch.float32).min
    for s, p in enumerate((7, 0, 127)):
        want = torch.full((128,), closed)
        want[: p + 1] = 0.0
        assert torch.equal(mask[s, 0, 0], want)
    assert pool.write_index.shape == (3, 2, 1, 16)  # (S, kv_heads, 1, head_dim)
    assert torch.equal(pool.write_index[:, 0, 0, 0], torch.tensor([7, 0, 127]))
    assert (pool.write_index == pool.write_index[:, :1, :, :1]).all()  # the same position for every head and dim


def test_a_step_writes_kv_exactly_at_each_slots_position_and_nowhere_else():
    model = random_model("qwen3", torch.float64, seed=1)
    pool, step = pool_and_step(model)
    pool.kv.normal_()  # stale K/V everywhere: a write anywhere shows
    before = pool.kv.clone()
    step.start(0, token=5, position=7, key=(1, 2), t=1)
    step.start(2, token=9, position=20, key=(3, 4), t=3)  # slot 1 stays idle: pad token at position 0
    step()
    changed = (pool.kv != before).any(dim=(0, 1, 3, 5))  # (S, T): any layer, head or dim
    want = torch.zeros(3, 128, dtype=torch.bool)
    want[0, 7] = want[1, 0] = want[2, 20] = True
    assert torch.equal(changed, want)
    assert (pool.kv != before)[:, :, [0, 1, 2], :, [7, 0, 20]].all()  # every layer, K and V, head and dim


def test_greedy_steps_equal_a_plain_forward_over_the_whole_sequence():
    model = random_model("llama", torch.float64, seed=2)
    pool, step = pool_and_step(model)
    prompt = [5, 9, 11, 40, 3]
    pool.load_prompt(1, prompt_kv(model, prompt[:-1]))
    step.start(1, token=prompt[-1], position=len(prompt) - 1, key=(0, 0), t=0)
    seq = list(prompt)
    for _ in range(4):
        out = step()
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
        want = int(logits.argmax())
        assert int(out[1, 0]) == want
        assert abs(out[1, 1] - float(torch.log_softmax(logits, -1)[want])) < 1e-10
        seq.append(want)
        step.advance(1, want)


def test_sampled_steps_draw_the_uniform_of_their_token_index():
    """t = position - offset on the device: the draw is the inverse CDF at the uniform of (key, t)."""
    model = random_model("qwen3", torch.float64, seed=3)
    pool, step = pool_and_step(model, temperature=1.0)
    prompt, key = [7, 8, 9], (12345, 678)
    pool.load_prompt(0, prompt_kv(model, prompt))
    token, seq = 31, [*prompt, 31]
    step.start(0, token=token, position=len(prompt), key=key, t=1)
    for t in (1, 2, 3):
        out = step()
        probs = torch.softmax(model(input_ids=torch.tensor([seq])).logits[0, -1], -1)
        u = float(counter_uniform(torch.tensor(key[0]), torch.tensor(key[1]), torch.tensor(t), torch.float64))
        cdf = probs.cumsum(0)
        want = int((cdf <= u * cdf[-1]).sum())  # first index with cdf > u * total
        assert int(out[0, 0]) == want, t
        seq.append(want)
        step.advance(0, want)
    step.idle(0)
    assert step.state[:, 0, 0].tolist() == [0] * 6  # token, position, key words, offset, rotary delta


def test_model_fingerprint_changes_with_everything_a_captured_graph_replays():
    from peft import LoraConfig, get_peft_model

    model = random_model("qwen3", seed=4)
    peft = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False)).eval()
    base = model_fingerprint(peft)
    assert model_fingerprint(peft) == base  # nothing changed: the graph is kept
    with peft.disable_adapter():
        assert model_fingerprint(peft) != base  # adapters off
    assert model_fingerprint(peft) == base
    peft.train()
    assert model_fingerprint(peft) != base  # train mode (dropout, branches)
    peft.eval()
    peft.merge_adapter()
    assert model_fingerprint(peft) != base  # merged into the base weights
    peft.unmerge_adapter()
    assert model_fingerprint(peft) == base
    weight = peft.get_input_embeddings().weight
    weight.data = weight.data.clone()  # same values, new storage
    moved = model_fingerprint(peft)
    assert moved != base
    peft.add_adapter("other", LoraConfig(r=2, target_modules="all-linear"))
    peft.set_adapter("other")
    assert model_fingerprint(peft) != moved  # another adapter active
