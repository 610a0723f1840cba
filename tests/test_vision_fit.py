"""GRPOModule on image prompts: the shipped tiny-vl trains on the shapes task in TRL's format, resumes exactly, hands
the rewards TRL's inputs, writes its processor beside the adapter, and runs each prompt's image through the vision
tower once a step (the rollout's prefill; the reference, old-policy and each iteration's update pass reuse its
features: the tower is frozen), never G times."""

import random

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from infgrpo import GRPOModule, SamplerConfig
from infgrpo.assets.calculator import make_split as calculator_split
from infgrpo.assets.shapes import correct, make_split
from infgrpo.builds.vl_tools import picture
from infgrpo.data import PromptDataModule
from infgrpo.settings import ConfigError
from infgrpo.training.optim import OptimizerConfig
from tests.agent.families import stock_template
from tests.helpers import trainer
from tests.sampler.engine.test_images import count_images

SEEN: list[dict] = []


def recording_correct(completions, answer, prompts, image, **kwargs):
    """The shapes task's reward, recording what TRL's convention handed it."""
    SEEN.append({"prompts": prompts, "image": image, "completions": completions})
    return correct(completions, answer)


SMALL = dict(
    policy={"model_name_or_path": "tiny-vl"},
    lora={"r": 4, "dropout": 0.1},
    group_size=4,
    sampler=SamplerConfig(num_slots=4, max_new_tokens=8),
    objective={"beta": 0.04},  # a reference pass (the policy without its adapters: the same tower)
    update={"num_iterations": 2, "share_prompt": "on", "skip_zero_advantage": "off"},  # old-policy + 2 update passes
    rewards={"functions": {f"{__name__}:recording_correct": 1.0}, "accuracy": f"{__name__}:recording_correct"},
    optimizer=OptimizerConfig(learning_rate=1e-3),
)


ROWS = make_split(8, "train", 0)  # the shipped task's rows in TRL's format (prompt, image, answer, kind), in memory


def data():
    return PromptDataModule(train_dataset=ROWS, tokenizer="tiny-vl", batch_size=2, eval_split=None)


@pytest.mark.slow  # two fits of a vision-language model
def test_a_fit_on_image_prompts_resumes_exactly_and_the_rewards_get_trls_inputs(tmp_path):
    L.seed_everything(0)
    straight = GRPOModule(**SMALL, output_dir="adapter")
    SEEN.clear()
    before = {k: v.clone() for k, v in straight.policy.state_dict().items()}
    seen, hook = count_images(straight.policy)  # images per call of the vision tower
    every = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=-1)  # after each GRPO step
    try:  # 2 GRPO steps: max_steps counts optimizer steps, num_iterations=2 a step
        trainer(tmp_path / "a", 4, callbacks=[every]).fit(straight, data())
    finally:
        hook.remove()
    # a step: 2 prompts of one image each, through the frozen tower once (the rollout's prefills), their features
    # reused by the reference, old-policy and 2 update passes (before: once a pass; TRL: x G in each of the 5)
    assert straight.sampler.calls == 2 and sum(seen) == 2 * 2 < 2 * 2 * 5 * SMALL["group_size"]
    assert all(not item["vision"].encoded for item in straight.last_step.batch)  # dropped after the update
    # the rewards: TRL's prompts (the image block injected before the text, holding the image), the image column
    first = SEEN[0]
    blocks = first["prompts"][0][0]["content"]
    assert blocks[0]["type"] == "image" and blocks[1] == {"type": "text", "text": blocks[1]["text"]}
    assert blocks[0]["image"] is first["image"][0] and first["image"][0].size == (56, 56)
    assert len(first["prompts"]) == len(first["image"]) == 2 * 4  # rows repeated G times, as TRL's
    assert first["completions"][0][0]["role"] == "assistant"
    saved = {p.name for p in (tmp_path / "a" / "adapter").iterdir()}
    assert {"adapter_model.safetensors", "processor_config.json", "chat_template.jinja"} <= saved
    assert not [n for n, p in straight.policy.named_parameters() if p.requires_grad and "visual" in n]  # tower frozen

    L.seed_everything(123)  # resuming must not depend on the global seed
    resumed = GRPOModule(**SMALL)
    trainer(tmp_path / "b", 4).fit(resumed, data(), ckpt_path=tmp_path / "ckpt" / "epoch=0-step=2.ckpt")
    assert resumed.sampler.calls == 2
    for (k, a), b in zip(straight.policy.state_dict().items(), resumed.policy.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    moved = [k for k, v in before.items() if not torch.equal(v, resumed.policy.state_dict()[k])]
    assert moved and all("lora" in k for k in moved)  # it trained, the adapters only


def test_image_prompts_train_with_dynamic_sampling_each_kept_group_with_its_images(tmp_path):
    L.seed_everything(0)  # a draw that keeps its groups: a capped one trains dropped groups the update skips
    small = {**SMALL, "objective": {"beta": 0.0}, "update": {"num_iterations": 1}}
    module = GRPOModule(**small, dynamic_sampling={"enabled": True, "max_prompts": 4})
    seen, hook = count_images(module.policy)
    try:
        trainer(tmp_path, 1).fit(module, data())
    finally:
        hook.remove()
    step = module.last_step
    assert module.global_step == 1 and len(step.batch) == len(step.rollouts.vision) >= 1
    assert all(v is item["vision"] for v, item in zip(step.rollouts.vision, step.batch, strict=True))  # by draw order
    drawn = step.rollouts.stats["dynamic/prompts_drawn"]
    assert step.rollouts.stats["dynamic/groups_kept"] >= len(step.batch)  # every trained group goes through the update
    assert sum(seen) == drawn  # each drawn prompt's image once (rollout); the update reuses the kept ones' features


CORRECT = "infgrpo.assets.calculator:correct"


def shorter(completions, **kwargs):
    """A reward that tells a group's samples apart (the tiny model rarely gets a sum right): shorter exchanges."""
    return [-len(str(c)) / 100 for c in completions]


def calculator_rows(n: int) -> list[dict]:
    """The calculator task's rows with TRL's ``image`` column: a shapes scene (``tiny-vl-tools`` calls its tool after
    one) or a blank image (it answers at once), in turn."""
    rng = random.Random(0)
    return [{**row, "image": picture(rng, blank=k % 2 == 1)} for k, row in enumerate(calculator_split(n, seed=3))]


def tool_module(tmp_path, **more) -> GRPOModule:
    """``tiny-vl-tools`` with the calculator's tool and Qwen3-VL's stock template (the shipped model's own renders no
    tool calls), 2 samples a prompt."""
    template = tmp_path / "qwen3_vl.jinja"
    template.write_text(stock_template("qwen3_vl"))
    agent = {"tools": ["infgrpo.assets.calculator:add"], "chat_template": str(template), "max_turns": 2}
    return GRPOModule(
        policy={"model_name_or_path": "tiny-vl-tools"}, lora={"r": 4}, group_size=2, agent=agent,
        sampler=SamplerConfig(num_slots=4, max_new_tokens=160), update={"skip_zero_advantage": "off"},
        rewards={"functions": {CORRECT: 1.0, f"{__name__}:shorter": 0.1}, "accuracy": CORRECT}, **more,
    )  # fmt: skip


def tool_data(n: int, eval_rows: int = 0) -> PromptDataModule:
    rows = calculator_rows(n + eval_rows)
    return PromptDataModule(
        train_dataset=rows[:n], eval_dataset=rows[n:] or None, tokenizer="tiny-vl-tools", batch_size=2,
        eval_split=None, max_prompt_length=1024,
    )  # fmt: skip


@pytest.mark.slow  # a fit of a VLM on 800-token tool prompts
def test_image_prompts_with_tools_train_through_the_processor(tmp_path):
    module, data = tool_module(tmp_path), tool_data(4)
    before = {k: v.clone() for k, v in module.policy.state_dict().items()}
    seen, hook = count_images(module.policy)
    try:
        trainer(tmp_path, 1).fit(module, data)
    finally:
        hook.remove()
    step = module.last_step
    rollouts = step.rollouts
    assert [v.num_images for v in rollouts.vision] == [1, 1] and sum(seen) == 2  # each prompt's image once a step
    # the data module measured the prompts the rollout decoded: rendered by the processor with the tool schemas
    assert [list(p) for p in rollouts.prompt_ids] == [item["prompt_ids"] for item in step.batch]
    text = data.processor.tokenizer.decode(rollouts.prompt_ids[0])
    assert '"name": "add"' in text and text.count("<|image_pad|>") == 16
    assert rollouts.tools.calls >= 1 and any(0 in m for m in rollouts.tool_masks)  # tools ran, results masked
    moved = [k for k, v in before.items() if not torch.equal(v, module.policy.state_dict()[k])]
    assert moved and all("lora" in k for k in moved)


@pytest.mark.slow  # a fit of a VLM on 800-token tool prompts, and held-out scoring
def test_image_prompts_with_tools_under_dynamic_sampling_and_held_out_scoring(tmp_path):
    L.seed_everything(0)
    module, data = tool_module(tmp_path, dynamic_sampling={"enabled": True, "max_prompts": 4}), tool_data(6, 2)
    seen, hook = count_images(module.policy)
    try:
        trainer(tmp_path, 1).fit(module, data)
        step = module.last_step
        drawn = step.rollouts.stats["dynamic/prompts_drawn"]
        assert sum(seen) == drawn and len(step.rollouts.vision) == len(step.batch) >= 1  # each drawn image once
        assert [list(p) for p in step.rollouts.prompt_ids] == [item["prompt_ids"] for item in step.batch]
        seen.clear()
        held_out = next(iter(data.val_dataloader()))  # the items as they are: the agent processes their images
        assert all("vision" not in item for item in held_out)
        scores = module.rollouts.heldout(module.eval_sampler, held_out, data)
    finally:
        hook.remove()
    assert sum(seen) == len(held_out) == 2 and len(scores.total) == 2  # each held-out image through the tower


def test_an_agent_template_that_cannot_place_an_image_is_one_line(tmp_path):
    tools = {"tools": ["infgrpo.assets.calculator:add"], "chat_template": "compact"}  # renders tools, not images
    module = GRPOModule(**SMALL, agent=tools)
    with pytest.raises(ConfigError, match=r"^model\.agent\.chat_template \(the agent's\) (does not|cannot) "):
        trainer(tmp_path, 1).fit(module, data())


def longer(completions, **kwargs):
    """A reward with a spread for a random model's answers: their length."""
    return [float(len(c[0]["content"])) for c in completions]


@pytest.mark.slow  # a fit of a vision-language model
def test_a_gemma3_fit_trains_its_language_model_on_image_prompts(tmp_path, random_vlm_folder):
    """A random tiny Gemma 3 (its image blocks and sliding window: the engine's and the shared update's own masks)
    through GRPOModule: LoRA on its language model, the tower frozen and each image through it once a step."""
    folder = random_vlm_folder("gemma3")
    L.seed_everything(0)
    rewards = {"functions": {f"{__name__}:longer": 1.0}, "accuracy": f"{__name__}:longer"}  # a random model: spread
    module = GRPOModule(**{**SMALL, "policy": {"model_name_or_path": folder}, "rewards": rewards})
    before = {k: v.clone() for k, v in module.policy.state_dict().items()}
    seen, hook = count_images(module.policy)
    try:  # one GRPO step: num_iterations=2 optimizer steps
        trainer(tmp_path, 2).fit(module, PromptDataModule(train_dataset=ROWS, tokenizer=folder, batch_size=2,
                                                           eval_split=None))  # fmt: skip
    finally:
        hook.remove()
    assert module.sampler.calls == 1 and sum(seen) == 2  # 2 prompts of one image: the rollout's prefill, reused after
    moved = [k for k, v in before.items() if not torch.equal(v, module.policy.state_dict()[k])]
    assert moved and all("lora" in k and "language_model" in k for k in moved)
