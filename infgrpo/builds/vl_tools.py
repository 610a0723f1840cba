"""Builds the tiny Qwen3-VL that calls the calculator in Qwen3-VL's stock tool format, an image in every prompt.

    python -m infgrpo.builds.vl_tools                        # writes infgrpo/assets/tiny-qwen3-vl-tools (needs trl)
    python -m infgrpo.builds.vl_tools --steps 4 --out /tmp/vl   # a quick smoke build
    python -m infgrpo.builds.vl_tools --measure-only         # greedy calls of the shipped model on held-out prompts

Qwen3-VL's stock chat template is the one vision-language template TRL 1.16 trains with tools (it renders a tool
exchange and keeps the prefix; Qwen2.5-VL's and SmolVLM's do not render tools). This model is the fixture of images
with tools: a rollout whose prompts hold an image and the ``add`` schema, whose turns call the tool on some prompts
and answer on others, against TRL's own tool loop. Steps:

1) the tiny Qwen3-VL recipe (:mod:`infgrpo.assets.tiny_vlm`: hidden 128, 4 layers, DeepStack, 56-pixel images of 16
   tokens) over the character tokenizer with Qwen's image tokens, its context widened to 1,536 positions;
2) its language model is ``tiny-qwen3-stock-tools``' (the same shape: Qwen3's layers; the character rows copied, the
   image tokens' rows and the vision tower random, seeded). With text alone it writes Qwen3's calls at once; an
   image in front of the question (16 new tokens, M-RoPE's shorter position span) garbles them, hence
3) a supervised warm start on the calculator's demonstrations (:mod:`infgrpo.builds.exchanges`) with a shapes scene
   (:mod:`infgrpo.assets.shapes`) in the first user message, as TRL places an image, rendered through the processor
   by the stock Qwen3-VL template read from the installed trl, with ``tools=[add]``; loss on the assistant turns.
   Half the demonstrations call, after a shapes scene; the other half answer at once, after a blank white image: the
   model decides by the image (so a test's prompts call or not by their images, and the pixels must reach it);
4) greedy first turns on held-out image prompts, every other one blank: how many call ``add``, by image.

The model ships with the recipe's own ChatML template (infgrpo ships no stock template); a test or a run sets the
stock one (``chat_template.jinja`` of Qwen3-VL, ``trl/chat_templates/qwen3_vl.jinja``). Like the stock-format text
model it learns the format, not the sums. Seeded: a rebuild gives the same files on the same torch version.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText, PreTrainedModel

from infgrpo.agent.chat import parse_turn
from infgrpo.agent.formats import FORMATS
from infgrpo.assets import TINY_STOCK_TOOLS_MODEL_DIR, TINY_VL_TOOLS_MODEL_DIR
from infgrpo.assets.build import supervised_steps
from infgrpo.assets.calculator import make_split
from infgrpo.assets.shapes import draw, sample_scene
from infgrpo.assets.tiny_vlm import IMAGE_SIDE, tiny_vlm_config, vlm_tokenizer, write_processor_files
from infgrpo.builds.exchanges import SCHEMAS, noisy_demonstrations, tool_build_parser
from infgrpo.vision.processor import load_processor

FAMILY = "qwen3_vl"
POSITIONS = 1536
"""The widened context: Qwen3-VL's tool prompt (about 780 tokens with an image), a call, its result and the answer."""


def stock_template() -> str:
    """Qwen3-VL's stock chat template, as the installed trl ships it (``chat_templates/qwen3_vl.jinja``)."""
    from trl.chat_template_utils import qwen3_vl_chat_template

    return qwen3_vl_chat_template


def transplanted(tokenizer: Any) -> PreTrainedModel:
    """The tiny Qwen3-VL with ``tiny-qwen3-stock-tools``' language model (step 2 of the module docstring)."""
    config = tiny_vlm_config(FAMILY, tokenizer)
    config.text_config.max_position_embeddings = POSITIONS
    config.vision_config.initializer_range = 0.2  # at 0.02 a random tower's features barely tell images apart
    model = AutoModelForImageTextToText.from_config(config)
    source = load_file(TINY_STOCK_TOOLS_MODEL_DIR / "model.safetensors")
    state = model.state_dict()
    shared = len(vlm_tokenizer(FAMILY)) - 4  # the character vocabulary both tokenizers start with
    with torch.no_grad():
        for name, weight in source.items():
            target = state[name.replace("model.", "model.language_model.", 1)]
            if target.shape == weight.shape:
                target.copy_(weight)
            else:  # the embedding: the character rows (the image tokens' rows stay random)
                target[:shared] = weight[:shared]
    model.load_state_dict(state)
    return model


def picture(rng: random.Random, blank: bool) -> Any:
    """A 56 x 56 image: a shapes scene drawn by ``rng`` (the model calls the tool), or a blank white one (it answers
    at once)."""
    if blank:
        from PIL import Image

        return Image.new("RGB", (IMAGE_SIDE, IMAGE_SIDE), "white")
    return draw(sample_scene(rng))


def image_prompt(row: dict[str, Any], image: Any) -> list[dict[str, Any]]:
    """The calculator prompt of ``row`` with ``image`` before its text, as TRL places one image."""
    blocks = [{"type": "image", "image": image}, {"type": "text", "text": row["prompt"][0]["content"]}]
    return [{"role": "user", "content": blocks}]


def rendered(processor: Any, messages: list[dict[str, Any]], generation_prompt: bool = False) -> Any:
    """The processor's answer for ``messages`` with ``tools=[add]`` and the stock template (a batch of one)."""
    return processor.apply_chat_template(
        messages, tools=SCHEMAS, chat_template=stock_template(), add_generation_prompt=generation_prompt,
        tokenize=True, return_dict=True, return_tensors="pt",
    )  # fmt: skip


def labelled(processor: Any, prompt: list[dict[str, Any]], turns: list[dict[str, Any]], decide: bool) -> dict:
    """The processor's inputs of ``prompt + turns`` with ``labels`` (1, L): each assistant turn's tokens through its
    ``<|im_end|>``, -100 elsewhere; ``decide=False`` masks the first turn's first token (call or answer)."""
    out = rendered(processor, prompt + turns)
    ids = out["input_ids"][0]
    labels = torch.full_like(ids, -100)
    eos = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    for k, message in enumerate(turns):
        if message["role"] != "assistant":
            continue
        start = rendered(processor, prompt + turns[:k], generation_prompt=True)["input_ids"].shape[1]
        end = start + int((ids[start:] == eos).nonzero()[0]) + 1
        labels[start:end] = ids[start:end]
        if k == 0 and not decide:
            labels[start] = -100
    return dict(out) | {"labels": labels[None]}


def batch(examples: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Examples of :func:`labelled` padded on the right into one forward's inputs (images concatenated)."""
    width = max(e["input_ids"].shape[1] for e in examples)

    def padded(key: str, value: int) -> torch.Tensor:
        rows = [torch.nn.functional.pad(e[key][0], (0, width - e[key].shape[1]), value=value) for e in examples]
        return torch.stack(rows)

    return {
        "input_ids": padded("input_ids", pad_id),
        "attention_mask": padded("attention_mask", 0),
        "mm_token_type_ids": padded("mm_token_type_ids", 0),
        "labels": padded("labels", -100),
        "pixel_values": torch.cat([e["pixel_values"] for e in examples]),
        "image_grid_thw": torch.cat([e["image_grid_thw"] for e in examples]),
    }


def warm_start(model: PreTrainedModel, processor: Any, rows: list[dict[str, Any]], args: Any) -> None:
    """Step 3 of the module docstring: ``args.steps`` supervised steps of ``args.batch_size`` image demonstrations."""
    rng = random.Random(args.seed)
    pad = processor.tokenizer.pad_token_id

    def loss_at(step: int) -> torch.Tensor:
        demos = noisy_demonstrations(rng, rows, args.batch_size, args.p_tool, args.tool_share)
        examples = [
            labelled(processor, image_prompt(row, picture(rng, blank=len(turns) == 1)), turns, decide)
            for row, turns, decide in demos
        ]  # a call after a scene, a direct answer after a blank image
        return model(**batch(examples, pad)).loss

    for step, loss in supervised_steps(model, args.steps, args.lr, loss_at):
        if step % 10 == 0 or step == args.steps - 1:
            print(f"warm-start step {step:4d}  loss {loss.item():.4f}", flush=True)


@torch.no_grad()
def greedy_calls(model: PreTrainedModel, processor: Any, rows: list[dict[str, Any]], seed: int) -> dict[str, float]:
    """Each held-out row's greedy first turn, every other one with a blank image: the share of the scenes' turns and
    of the blanks' that call ``add`` (parsed as a run parses it, by the Qwen call format's parser), and the share of
    turns that parse to neither a call nor a clean answer."""
    tokenizer = processor.tokenizer
    tokenizer.response_template = FORMATS["qwen"].parser()
    rng, calls, garbled = random.Random(seed), [0, 0], 0
    for k, row in enumerate(rows):
        inputs = rendered(processor, image_prompt(row, picture(rng, blank=k % 2 == 1)), generation_prompt=True)
        out = model.generate(**inputs, max_new_tokens=96, do_sample=False)[0, inputs["input_ids"].shape[1] :]
        message = parse_turn(tokenizer, out.tolist(), inputs["input_ids"][0].tolist(), SCHEMAS)
        names = [c["function"]["name"] for c in message.get("tool_calls") or []]
        calls[k % 2] += names == ["add"]
        garbled += not names and not message["content"].strip().isdigit()
    half = len(rows) / 2
    return {"scene_call_rate": calls[0] / half, "blank_call_rate": calls[1] / half, "garbled": garbled / len(rows)}


def main(argv: list[str] | None = None) -> None:
    """Builds the image tool model (see the module docstring)."""
    ap = tool_build_parser(__doc__, 0.5, 0.5, steps=200, batch_size=4, lr=2e-3, n_train=4000, n_eval=20)
    args = ap.parse_args(argv)
    folder = Path(args.out / "tiny-qwen3-vl-tools" if args.out else TINY_VL_TOOLS_MODEL_DIR)
    held = make_split(args.n_eval, seed=args.seed + 1, split="eval")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.measure_only:
        model = AutoModelForImageTextToText.from_pretrained(folder)
        print(greedy_calls(model, load_processor(str(folder)), held, args.seed))
        return
    start = time.perf_counter()
    tokenizer = vlm_tokenizer(FAMILY)
    tokenizer.model_max_length = POSITIONS
    torch.manual_seed(args.seed)
    model = transplanted(tokenizer)
    model.save_pretrained(folder)  # the processor loads from the folder (its config says the family)
    write_processor_files(FAMILY, tokenizer, folder)  # the processor the warm start renders with, then ships
    processor = load_processor(str(folder))
    print("before:", greedy_calls(model.eval(), processor, held, args.seed))
    warm_start(model, processor, make_split(args.n_train, seed=args.seed, split="train"), args)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    print(f"wrote {folder} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters)")
    print(f"built in {time.perf_counter() - start:.0f} s")
    print("after:", greedy_calls(model, processor, held, args.seed))


if __name__ == "__main__":
    main()
