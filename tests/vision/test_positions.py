"""Image prompts prefilled once, their K/V copied into slots, decoded with per-slot positions: equal to HF generate."""

import torch

from infgrpo.vision.families import banned_token_ids, family_of
from infgrpo.vision.inputs import collate, token_types
from infgrpo.vision.positions import completion_positions, decode_positions, prompt_positions
from tests.vision.conftest import render

PROMPTS = ((0, "how many shapes?"), (1, "colours, left to right?"), (2, "how many?"))  # 0, 1 and 2 images


def greedy_generate(model, out, steps, banned):
    kwargs = {k: v for k, v in out.items()}
    gen = model.generate(**kwargs, max_new_tokens=steps, do_sample=False, suppress_tokens=banned,
                         eos_token_id=None, pad_token_id=0, min_new_tokens=steps)  # fmt: skip
    return gen[0, out["input_ids"].shape[1] :].tolist()


def test_one_prefill_per_prompt_then_slots_with_their_deltas_decode_as_generate(vlm):
    model, processor = vlm
    family, banned, steps, group = family_of(model.config), banned_token_ids(model.config), 6, 3
    rendered = [render(processor, n, text, seed=n) for n, text in PROMPTS]
    # 1) the prompts, left-padded, in one prefill with their positions and each prompt's delta
    width = max(len(ids) for ids, _, _ in rendered)
    ids = torch.tensor([[0] * (width - len(p)) + p for p, _, _ in rendered])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p, _, _ in rendered])[:, None]).long()
    visions = [v for _, v, _ in rendered]
    positions, deltas = prompt_positions(model, ids, mask, visions)
    if family.positions == "mrope":
        assert deltas[0] == 0 and deltas[1] < 0 and deltas[2] < deltas[1]  # an image takes fewer positions than tokens
    images = collate(visions, family)
    if family.image_blocks:  # Gemma 3 builds its image blocks' mask from the token types
        images[family.token_types] = token_types(visions, width)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **images)
    # 2) each prompt's K/V copied into `group` slots; each slot decodes at cache position + its prompt's delta
    cache = out.cache
    cache.batch_repeat_interleave(group)
    logits = out.logits[:, -1].repeat_interleave(group, dim=0)  # (S, V)
    slot_delta = deltas.repeat_interleave(group)[:, None]  # (S, 1)
    slot_mask = mask.repeat_interleave(group, dim=0)
    tokens = []
    for t in range(steps):
        logits[:, banned] = -torch.inf
        nxt = logits.argmax(-1, keepdim=True)  # (S, 1)
        tokens.append(nxt)
        slot_mask = torch.cat([slot_mask, torch.ones_like(nxt)], dim=1)
        cache_pos = torch.full_like(nxt, width + t)
        step_positions = decode_positions(
            cache_pos - (width - slot_mask[:, :width].sum(1, keepdim=True)), slot_delta, family.positions
        )  # fmt: skip  (cache position of the real tokens)
        with torch.no_grad():
            step = model(
                input_ids=nxt, attention_mask=slot_mask, position_ids=step_positions, cache=cache, use_cache=True
            )
        cache, logits = step.cache, step.logits[:, -1]
    got = torch.cat(tokens, dim=1)  # (S, steps)
    # 3) HF generate, one prompt at a time, with the pixels (it computes the positions itself)
    for i, (_, _, alone) in enumerate(rendered):
        want = greedy_generate(model, alone, steps, banned)
        for slot in range(i * group, (i + 1) * group):
            assert got[slot].tolist() == want, (i, slot)


def test_completion_positions_continue_the_prompt_as_get_rope_index_does(vlm):
    model, processor = vlm
    family = family_of(model.config)
    prompt, vision, _ = render(processor, 2, "how many?")
    completion = [5, 9, 11, 7]
    row = torch.tensor([prompt + completion])
    full, delta = prompt_positions(model, row, torch.ones_like(row), [vision], completion=len(completion))
    alone = completion_positions(torch.tensor([len(prompt)]), delta, len(completion), family.positions)
    assert torch.equal(full[..., len(prompt) :], alone)
