"""Builds the tiny model that calls the calculator in two stock templates' formats: Qwen3's and Llama 3.1's.

    python -m infgrpo.builds.stock_tools            # writes infgrpo/assets/tiny-qwen3-stock-tools (needs trl)
    python -m infgrpo.builds.stock_tools --steps 4 --out /tmp/stock   # a quick smoke build
    python -m infgrpo.builds.stock_tools --measure-only   # samples the shipped model in both formats

The shipped tool model (``tiny-qwen3-tools``) learned the compact template, whose prompt is about 40 tokens. A stock
template writes the tool schemas into a long prompt: with ``tools=[add]`` and this character tokenizer, 700 tokens in
Qwen3's format and 1,070 in Llama 3.1's. Steps:

1) the character tokenizer plus Llama 3's header and turn tokens as special tokens (ChatML's are there already), as
   the real tokenizers have them; its own chat template is infgrpo's ``qwen3.jinja`` (Qwen3's format, every think block
   kept), its EOS ``<|im_end|>``; the model's generation config also stops on ``<|eot_id|>``;
2) ``tiny-qwen3-tools``' weights, its context widened to 1,536 positions (rotary positions: no new weights) and an
   embedding row for each new token;
3) a supervised warm start on noisy demonstrations (:mod:`infgrpo.builds.exchanges`), one format a step, in turn:
   rendered by ``qwen3.jinja`` (what TRL 1.16 renders Qwen3's tool exchanges with, its training template) and by Llama
   3.1's stock template (read from the installed trl). The prompt's part every row shares (the system prompt and the
   tool schema) runs once a step, and the batch's rest (the question and the exchange) runs on its K/V: the full
   sequences' loss and gradients (:func:`shared_prefix_loss`) for about a fifth of the compute. That shared part is
   shown from its end, growing to the whole over the first ``ramp`` (60 %) of the steps;
4) the model is sampled at temperature 1 on held-out prompts in each format, as TRL's tool loop runs it.

What it learns: each format's turns, calls and ends (their tokens at about zero loss), and to call on about half of
the prompts (``p_tool`` 0.5, so that greedy rollouts call on some prompts and not others). What it does not: copying
the operands' digits across a 700 to 1,070-token prompt. ``tiny-qwen3-tools`` learned to copy in 40-token prompts, and
a longer prompt in front of the same exchange takes that away (600 tokens of system text: from 0.02 to 4.6 nats a
token); 400 steps give the formats, not the copying, so its calls carry wrong operands. It is a fixture for the
formats (greedy rollouts against TRL's tool loop), not a model that solves the task: about 400 s on one CPU thread.

Everything is seeded, so a rebuild gives the same files on the same torch version.
"""

from __future__ import annotations

import copy
import os
import random
import time
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from infgrpo.agent.formats import FORMATS
from infgrpo.agent.shipped import shipped_template
from infgrpo.assets import TINY_STOCK_TOOLS_MODEL_DIR, TINY_TOOLS_MODEL_DIR
from infgrpo.assets.build import supervised_steps
from infgrpo.assets.calculator import make_split
from infgrpo.assets.tokenizer import build_tokenizer
from infgrpo.builds.exchanges import (
    decision_offset,
    labelled_exchange,
    measure,
    noisy_demonstrations,
    render,
    tool_build_parser,
)

LLAMA_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
"""Llama 3's special tokens that its template writes (``<|begin_of_text|>`` is its BOS, ``<|eot_id|>`` its EOS)."""

POSITIONS = 1536
"""The widened context: Llama 3.1's prompt (1,070 tokens), a call, its result and the answer fit."""


@dataclass(frozen=True)
class Taught:
    """One format the model is taught: its template, its end-of-turn token and its call format's name."""

    name: str
    template: str
    eos: str


def taught_formats() -> list[Taught]:
    """Qwen3's (infgrpo's prefix-preserving ``qwen3.jinja``) and Llama 3.1's (the stock template trl ships)."""
    from trl.chat_template_utils import llama3_1_chat_template

    return [
        Taught("qwen", shipped_template("qwen3"), "<|im_end|>"),
        Taught("llama3", llama3_1_chat_template, "<|eot_id|>"),
    ]


def stock_tokenizer() -> PreTrainedTokenizerFast:
    """The character tokenizer with Llama 3's special tokens, ``qwen3.jinja`` as its template and a wide context."""
    tokenizer = build_tokenizer()
    tokenizer.add_tokens(LLAMA_TOKENS, special_tokens=True)
    tokenizer.bos_token = "<|begin_of_text|>"  # Llama 3.1's template starts with it; Qwen3's never writes it
    tokenizer.chat_template = shipped_template("qwen3")
    tokenizer.model_max_length = POSITIONS
    return tokenizer


def speaking(tokenizer: PreTrainedTokenizerBase, taught: Taught) -> PreTrainedTokenizerBase:
    """A copy of ``tokenizer`` set up as a run in ``taught``'s format sets it: its template, EOS and parser."""
    out = copy.deepcopy(tokenizer)
    out.chat_template, out.eos_token = taught.template, taught.eos
    out.response_template = FORMATS[taught.name].parser()
    return out


def widened(tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """``tiny-qwen3-tools`` with :data:`POSITIONS` positions, a row for each new token and both EOS ids to stop on."""
    model = AutoModelForCausalLM.from_pretrained(TINY_TOOLS_MODEL_DIR, dtype=torch.float32)
    model.config.max_position_embeddings = POSITIONS
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    return model


def shared_prefix(tokenizer: PreTrainedTokenizerBase, template: str) -> list[int]:
    """The ids every calculator prompt starts with in ``template`` (the system prompt and the tool schema): where
    two one-message prompts that differ in their first character part."""
    first, second = (render(tokenizer, template, [{"role": "user", "content": c}], True) for c in "AB")
    return first[: next(k for k, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)]


def shared_prefix_loss(
    model: PreTrainedModel, prefix: list[int], pairs: list[tuple[list[int], list[int]]], pad_id: int
) -> torch.Tensor:
    """The language-model loss of ``pairs`` ((ids, labels) that all start with ``prefix``), with the prefix run once
    and each pair's rest run on its K/V, repeated: the full sequences' logits and, as the prefix's computation is the
    same in every row, their gradients, for one prefix's compute instead of one a row."""
    p = len(prefix)
    assert all(ids[:p] == prefix for ids, _ in pairs), "every sequence starts with the shared prefix"
    rests = [(ids[p:], labels[p:]) for ids, labels in pairs]
    width, batch = max(len(ids) for ids, _ in rests), len(rests)
    ids = torch.full((batch, width), pad_id)
    labels = torch.full((batch, width), -100)
    mask = torch.zeros(batch, p + width, dtype=torch.long)
    mask[:, :p] = 1
    for i, (rest, lab) in enumerate(rests):
        ids[i, : len(rest)], labels[i, : len(lab)], mask[i, p : p + len(rest)] = (
            torch.tensor(rest),
            torch.tensor(lab),
            1,
        )
    cache = model(input_ids=torch.tensor([prefix]), use_cache=True).cache  # (1, prefix) K/V, in the autograd graph
    cache.batch_repeat_interleave(batch)  # each row reads the same K/V: their gradients add up in the prefix
    positions = (p + torch.arange(width)).expand(batch, width)  # right padding: real tokens keep their positions
    return model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, labels=labels).loss


def warm_start(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: list[dict[str, Any]],
    args: Any,
) -> None:
    """The warm-start recipe (:func:`~infgrpo.assets.build.supervised_steps`) on noisy demonstrations, one taught
    format a step, in turn."""
    rng = random.Random(args.seed)
    formats = taught_formats()
    plans = []
    for taught in formats:
        eos = tokenizer.convert_tokens_to_ids(taught.eos)
        prefix = shared_prefix(tokenizer, taught.template)
        plans.append((taught, eos, prefix, decision_offset(tokenizer, taught.template, rows[0]["prompt"])))
    ramp = max(1, round(args.ramp * args.steps))

    def shown(step: int, prefix: list[int]) -> int:  # the shared part's tail shown, growing to it all over the ramp
        return max(1, round(len(prefix) * min(1.0, step / ramp)))

    def loss_at(step: int) -> torch.Tensor:
        taught, eos, prefix, decide_at = plans[step % len(plans)]
        demos = noisy_demonstrations(rng, rows, args.batch_size, args.p_tool, args.tool_share)
        pairs = [
            labelled_exchange(tokenizer, taught.template, eos, row["prompt"], turns, decide, decide_at)
            for row, turns, decide in demos
        ]
        drop = len(prefix) - shown(step, prefix)  # the head not shown yet
        pairs = [(ids[drop:], labels[drop:]) for ids, labels in pairs]
        return shared_prefix_loss(model, prefix[drop:], pairs, tokenizer.pad_token_id)

    for step, loss in supervised_steps(model, args.steps, args.lr, loss_at):
        if step % 25 == 0 or step == args.steps - 1:
            taught, _, prefix, _ = plans[step % len(plans)]
            text = f"{taught.name:6s}  prefix {shown(step, prefix):5d}  loss {loss.item():.4f}"
            print(f"warm-start step {step:5d}  {text}", flush=True)


def rates(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, rows: list[dict[str, Any]], seed: int) -> dict:
    """:func:`~infgrpo.builds.exchanges.measure` in each taught format."""
    stops = tokenizer.convert_tokens_to_ids([t.eos for t in taught_formats()])
    return {t.name: measure(model, speaking(tokenizer, t), t.template, rows, seed, stops) for t in taught_formats()}


def main(argv: list[str] | None = None) -> None:
    """Builds the stock-format tool model (see the module docstring)."""
    ap = tool_build_parser(__doc__, 0.5, 0.9, steps=400, batch_size=8, lr=2e-3, n_train=4000, n_eval=40)
    ap.add_argument("--ramp", type=float, default=0.6, help="share of the steps over which the prompt grows to full")
    args = ap.parse_args(argv)
    model_dir = args.out / "tiny-qwen3-stock-tools" if args.out else TINY_STOCK_TOOLS_MODEL_DIR
    held = make_split(args.n_eval, seed=args.seed + 1, split="eval")  # the calculator's splits, as tools.py draws
    if args.measure_only:
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        print(rates(model, PreTrainedTokenizerFast.from_pretrained(model_dir), held, args.seed))
        return
    start = time.perf_counter()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    # 1) tokenizer; 2) the widened model
    tokenizer = stock_tokenizer()
    torch.manual_seed(args.seed)
    model = widened(tokenizer)
    # 3) warm start, one format a step
    warm_start(model, tokenizer, make_split(args.n_train, seed=args.seed, split="train"), args)
    model.generation_config.eos_token_id = tokenizer.convert_tokens_to_ids([t.eos for t in taught_formats()])
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    print(f"wrote {model_dir} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters)")
    print(f"built in {time.perf_counter() - start:.0f} s")
    # 4) what it does in each format
    print(rates(model, tokenizer, held, args.seed))


if __name__ == "__main__":
    main()
