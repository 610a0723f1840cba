"""Image prompts with tools against TRL 1.16: ``tiny-vl-tools`` (a tiny Qwen3-VL that calls the calculator) with
Qwen3-VL's stock chat template (read from trl: the VLM template TRL trains with tools), an image before each question
and ``tools=[add]``, in float64.

- the rollout, greedy: TRL's own tool loop (``GRPOTrainer._generate`` with the processor as ``processing_class``)
  gives the same prompt ids, completion ids, tool masks and messages, some prompts calling the tool and some
  answering at once; 3 slots give the same tokens as 1;
- the update on that rollout: loss and gradients equal TRL's loss formula with its ``tool_mask`` over one HF forward a
  row with its prompt's pixels (1e-10), shared prompts and not;
- what cannot work is one line: an image prompt whose samples got different environment observations (its samples
  share one prefill), a tool result holding an image.
"""

import copy
import random
import tempfile

import pytest
import torch

from infgrpo.agent import AgentConfig
from infgrpo.agent.environments import AgentError, with_observation
from infgrpo.agent.turns import check_text_results
from infgrpo.algo import Objective
from infgrpo.assets.calculator import add, make_split
from infgrpo.builds.vl_tools import picture
from infgrpo.data.images import inject_images
from infgrpo.policy.load import load_policy
from infgrpo.sampler import MicroGroupSampler, SamplerConfig
from infgrpo.settings import ConfigError
from infgrpo.training.agent_rollout import AgentRollout
from infgrpo.update.config import UpdateConfig
from infgrpo.update.runner import PolicyUpdate
from infgrpo.vision.features import forget_features
from infgrpo.vision.processor import load_processor
from tests.agent.families import stock_template
from tests.algo.trl_reference import TRLLoss
from tests.helpers import ALLOW_OBJECTIVE_WARNINGS, float64_norms

trl = pytest.importorskip("trl")

SEED = 11

CAP, ROWS, TOOLS = 160, 4, ["infgrpo.assets.calculator:add"]


def stock_processor():
    """``tiny-vl-tools``' processor with Qwen3-VL's stock chat template (processor and tokenizer), no response
    template: set up as a Qwen3-VL checkpoint ships."""
    processor = load_processor("tiny-vl-tools")
    processor.chat_template = processor.tokenizer.chat_template = stock_template("qwen3_vl")
    processor.tokenizer.response_template = None
    return processor


def image_tensors(processor):
    """``processor`` whose un-tensored ``apply_chat_template`` gives its image arrays as tensors, for TRL's side:
    TRL 1.16 calls it without ``return_tensors`` and reads ``pixel_values.size(0)``, ``image_grid_thw.prod(-1)``,
    which the fast (torchvision) image processor's tensors have; the PIL one, all a CPU machine here can load, gives
    numpy arrays. The ids and the values are unchanged."""
    stock = processor.apply_chat_template

    def apply_chat_template(*args, **kwargs):
        out = stock(*args, **kwargs)
        if kwargs.get("return_dict") and kwargs.get("return_tensors") is None:
            for key in ("pixel_values", "image_grid_thw"):
                if key in out:
                    out[key] = torch.as_tensor(out[key])
        return out

    processor.apply_chat_template = apply_chat_template
    return processor


def image_items(n: int, seed: int) -> list[dict]:
    """``n`` held-out calculator rows as data items with one image each, a shapes scene and a blank image in turn
    (the model calls the tool after a scene and answers at once after a blank: ``infgrpo.builds.vl_tools``): the
    prompt as TRL rewrites it."""
    rng = random.Random(seed)
    items = []
    for k, row in enumerate(make_split(n, seed=seed, split="eval")):
        image = picture(rng, blank=k % 2 == 1)
        prompt = inject_images(row["prompt"], [image])  # what the data module's item holds (and the conversation)
        items.append({"prompt": prompt, "images": [image], "meta": row, "conversation": row["prompt"]})
    return items


@pytest.fixture(scope="module")
def model():
    return load_policy("tiny-vl-tools", dtype="float64").eval()


@pytest.fixture(scope="module")
def decoded(model):
    """The agent's greedy rollout of the image prompts on 1 slot: (items, processor, rollouts, exchanges, prompts)."""
    return decode(model, 1)


def decode(model, slots: int):
    processor, items = stock_processor(), image_items(ROWS, seed=SEED)
    agent = AgentRollout(AgentConfig(tools=TOOLS, max_turns=2), processor.tokenizer)
    agent.processor = processor
    cfg = SamplerConfig(num_slots=slots, max_new_tokens=CAP, temperature=0.0)
    rollouts, exchanges = agent.decode(MicroGroupSampler(model, processor.tokenizer, cfg), items, 1, seed=0)
    agent.close()
    return items, processor, rollouts, exchanges, agent.prompt_ids(items)


def trl_tool_loop(model, prompts: list) -> tuple:
    """TRL 1.16's generation with ``tools=[add]`` and the processor, greedy: (prompt ids, completion ids, tool
    masks, completions)."""
    from datasets import Dataset

    args = trl.GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=2, num_generations=2, report_to=[], use_cpu=True,
        max_completion_length=CAP, max_tool_calling_iterations=2, generation_kwargs={"do_sample": False},
    )  # fmt: skip
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
        train_dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": "1+2?"}]}] * 2),
        processing_class=image_tensors(stock_processor()), tools=[add],
    )  # fmt: skip
    trainer._sync_tool_dicts = [{"add": add} for _ in prompts]  # what _generate_and_score_completions sets first
    trainer._async_tool_dicts = [{} for _ in prompts]
    prompt_ids, completion_ids, tool_mask, completions, *_ = trainer._generate(prompts)
    return prompt_ids, completion_ids, tool_mask, completions


def test_greedy_image_tool_rollouts_equal_trl_1_16_s_tool_loop(model, decoded):
    items, _, rollouts, exchanges, prompt_ids = decoded
    assert rollouts.vision is not None and all(v.num_images == 1 for v in rollouts.vision)
    got = trl_tool_loop(copy.deepcopy(model), [item["prompt"] for item in items])  # TRL turns on checkpointing
    assert prompt_ids == [list(p) for p in got[0]]
    assert [list(c) for c in rollouts.completion_ids] == [list(c) for c in got[1]]
    masks = rollouts.tool_masks or [[1] * len(c) for c in rollouts.completion_ids]
    assert masks == [list(m) for m in got[2]]
    assert exchanges == got[3]
    called = [any(m["role"] == "tool" for m in e) for e in exchanges]
    assert called == [True, False] * (ROWS // 2)  # after a scene it calls, after a blank image it answers at once
    assert all(e[1]["content"] == str(add(**e[0]["tool_calls"][0]["function"]["arguments"])) for e in exchanges[::2])


def test_image_tool_rollouts_are_the_same_tokens_on_3_slots(model, decoded):
    _, _, rollouts, exchanges, _ = decoded
    _, _, three, exchanges3, _ = decode(model, 3)
    assert three.completion_ids == rollouts.completion_ids and three.tool_masks == rollouts.tool_masks
    assert exchanges3 == exchanges


def float64_reference(model, rollouts, advantages, obj):
    """TRL's loss formula with its ``tool_mask`` over each row's own HF forward with its prompt's pixels (float64):
    (loss, gradients)."""
    logps, ents = [], []
    for prompt, completion, vision in zip(rollouts.prompt_ids, rollouts.completion_ids, rollouts.vision, strict=True):
        full = torch.tensor([list(prompt) + list(completion)])
        types = torch.cat([vision.token_types, torch.zeros(len(completion), dtype=torch.long)])[None]
        model.model.rope_deltas = None
        logits = model(input_ids=full, attention_mask=torch.ones_like(full), mm_token_type_ids=types,
                       **vision.tensors).logits  # fmt: skip
        lp = torch.log_softmax(logits[0, len(prompt) - 1 : -1], dim=-1)
        logps.append(lp.gather(-1, torch.tensor(completion)[:, None])[:, 0])
        ents.append(-(lp.exp() * lp).sum(-1))
    pad = lambda xs, v=0.0: torch.stack([torch.cat([x, x.new_full((CAP - len(x),), v)]) for x in xs])  # noqa: E731
    mask = pad([torch.ones(len(c), dtype=torch.float64) for c in rollouts.completion_ids])
    tool = pad([torch.tensor(m, dtype=torch.float64) for m in rollouts.tool_masks], 1.0)  # TRL pads it with 1
    loss = TRLLoss(obj, CAP)(pad(logps), pad(ents), advantages, mask, (mask * tool).sum().item(), tool_mask=tool)
    model.zero_grad(set_to_none=True)
    loss.backward()
    return loss.item(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@ALLOW_OBJECTIVE_WARNINGS
def test_the_update_on_image_tool_rollouts_equals_the_float64_formula(model, decoded):
    _, _, rollouts, _, _ = decoded
    assert rollouts.tool_masks is not None and any(0 in m for m in rollouts.tool_masks)
    obj = Objective(loss_type="dapo")
    advantages = torch.linspace(-1.0, 1.2, len(rollouts.completion_ids), dtype=torch.float64)
    policy = float64_norms(copy.deepcopy(model)).train()
    want_loss, want = float64_reference(policy, rollouts, advantages, obj)
    for share in (True, False):
        got: dict = {}

        def keep(got=got):
            got.update({k: p.grad.clone() for k, p in policy.named_parameters() if p.grad is not None})

        updater = PolicyUpdate(UpdateConfig(token_budget=1200), obj, max_completion_length=CAP, share_prompt=share)
        forget_features(rollouts.vision)
        policy.zero_grad(set_to_none=True)
        result = updater.run(policy, rollouts, advantages, lambda x: x.backward(), keep,
                             lambda: policy.zero_grad(set_to_none=True))  # fmt: skip
        assert result.stats["micro_batches"] >= 2, share
        assert result.stats["loss"] == pytest.approx(want_loss, rel=1e-10), share
        assert want.keys() == got.keys() and not any("visual" in k for k in got)  # the tower frozen, as loaded
        for k, g in want.items():
            assert (got[k] - g).abs().max() <= 1e-10 * max(g.abs().max().item(), 1.0), (share, k)


def test_an_observation_joins_an_image_prompt_as_a_text_block():
    prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Count"}]}]
    out = with_observation(prompt, " (start at 3)")
    assert out[0]["content"][1:] == [{"type": "text", "text": "Count"}, {"type": "text", "text": " (start at 3)"}]
    assert len(prompt[0]["content"]) == 2  # the row is left as it was


def test_an_image_prompt_whose_samples_observe_apart_is_one_line():
    processor = stock_processor()
    agent = AgentRollout(AgentConfig(environment="tests.agent.toolbox:Moody"), processor.tokenizer, group_size=2)
    agent.processor = processor
    with pytest.raises(ConfigError, match=r"^model\.agent\.environment: the environments of prompt 0 \(an image"):
        agent.prompt_ids(image_items(1, seed=2))
    same = AgentRollout(AgentConfig(environment="tests.agent.toolbox:Counter"), processor.tokenizer, group_size=2)
    same.processor = processor
    item = image_items(1, seed=2)[0]
    ids = same.prompt_ids([{**item, "meta": {**item["meta"], "start": 4}}])
    assert same.visions is not None and same.visions[0].num_images == 1 and same.sample_prompts is None
    # TRL's order: the observation joins the dataset's text, then the images are injected (one text block)
    text = item["conversation"][0]["content"] + " (start at 4)"
    trl_order = [
        {"role": "user", "content": [{"type": "image", "image": item["images"][0]}, {"type": "text", "text": text}]}
    ]
    want = processor.apply_chat_template(trl_order, tools=same.schemas({}), add_generation_prompt=True, tokenize=True,
                                         return_dict=True)["input_ids"][0]  # fmt: skip
    assert ids[0] == list(want)


def test_an_image_prompt_without_the_processor_is_one_line():
    agent = AgentRollout(AgentConfig(tools=TOOLS), stock_processor().tokenizer)
    with pytest.raises(ConfigError, match=r"^an image prompt reached model\.agent's rollout without the model's proc"):
        agent.prompt_ids(image_items(1, seed=2))


def test_a_tool_result_holding_an_image_is_one_line():
    result = [{"role": "tool", "name": "snap", "content": [{"type": "image", "image": None}]}]
    with pytest.raises(AgentError, match=r"^sample 1 of prompt 0: tool 'snap' returned an image block"):
        check_text_results((0, 1), result)
    check_text_results((0, 1), [{"role": "tool", "name": "add", "content": [{"type": "text", "text": "3"}]}])
