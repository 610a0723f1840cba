"""Dynamic sampling with image prompts: the rows drawn beyond the batch get their vision inputs as they are drawn,
processed as the data module's collate processes a batch (the engine's side: tests/sampler/engine/test_images.py)."""

import datasets
import torch

from infgrpo.assets.shapes import make_split
from infgrpo.data import PromptDataModule
from infgrpo.training.adaptive import AdaptiveGroupsConfig
from infgrpo.training.dynamic import DynamicSamplingConfig
from infgrpo.training.judged_rollout import JudgedRollout


def test_rows_drawn_from_the_stream_carry_their_images_by_draw_position():
    rows = [{k: r[k] for k in ("prompt", "image", "answer")} for r in make_split(6, "train", 0)]
    data = datasets.Dataset.from_list(rows).cast_column("image", datasets.Image())
    dm = PromptDataModule(train_dataset=data, tokenizer="tiny-vl", eval_split=None, batch_size=2)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))  # collated: each item holds its vision inputs
    rollout = JudgedRollout(DynamicSamplingConfig(enabled=True), AdaptiveGroupsConfig(), None, None, group_size=2)
    items = []
    source, longest, turns, visions = rollout.draws(batch, dm, items)
    drawn = [next(source) for _ in range(5)]  # the batch's 2, then 3 rows of the stream
    assert turns is None and longest == dm.longest_prompt() and len(visions) == len(items) == 5
    assert drawn == [item["prompt_ids"] for item in items]
    assert visions[0] is batch[0]["vision"] and visions[1] is batch[1]["vision"]  # the batch's own, not processed again
    for item, vision in zip(items[2:], visions[2:], strict=True):  # the stream's, as collate processes them
        want = dm.collate([{k: v for k, v in item.items() if k != "vision"}])[0]["vision"]
        assert vision is item["vision"] and vision.image_tokens == want.image_tokens > 0
        assert torch.equal(vision.tensors["pixel_values"], want.tensors["pixel_values"])
