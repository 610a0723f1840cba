"""Builds the tool-calling tiny model: the tiny Qwen3 warm-started to call a calculator on large sums.

    python -m infgrpo.builds.tools            # writes infgrpo/assets/tiny-qwen3-tools and tiny-data/calculator-*
    python -m infgrpo.builds.tools --steps 20 --out /tmp/tools   # a quick smoke build
    python -m infgrpo.builds.tools --measure-only   # samples the shipped model and prints its rates

Steps: 1) the character tokenizer of :mod:`infgrpo.assets.build`, given the compact tool template (the agent room's
``compact``) and the response template of its calls (the agent room's ``qwen`` call format); 2) the train / held-out
splits of :mod:`infgrpo.assets.calculator`; 3) the tiny architecture; 4) a supervised warm start on *noisy*
demonstrations rendered by the real template with ``tools=[add]`` (:mod:`infgrpo.builds.exchanges`): ``tool_share``
(0.9) of them are whole exchanges, while the one token that chooses between a call and an answer is supervised on a
subset in which ``p_tool`` (0.3) call. The loss covers the assistant tokens only. 5) the model is sampled at
temperature 1 on held-out prompts: it calls the tool in about ``p_tool`` of its samples and answers right more often
when it does, so GRPO with the ``correct`` reward has a tool-call rate to raise. Everything is seeded, so a rebuild
gives the same files on the same torch version (about 7 minutes on one CPU thread).
"""

from __future__ import annotations

import random
import time
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast, Qwen3ForCausalLM

from infgrpo.agent.formats import FORMATS
from infgrpo.agent.shipped import shipped_template
from infgrpo.assets import TINY_DATA_DIR, TINY_TOOLS_MODEL_DIR
from infgrpo.assets.build import fit_supervised, pad_batch, save_model, tiny_config, write_jsonl
from infgrpo.assets.calculator import make_split, parse_tool_call
from infgrpo.assets.tokenizer import build_tokenizer
from infgrpo.builds.exchanges import labelled_exchange, measure, noisy_demonstrations, tool_build_parser


def tools_tokenizer() -> PreTrainedTokenizerFast:
    """The character tokenizer with the compact tool template and the response template of its calls set."""
    tokenizer = build_tokenizer()
    tokenizer.chat_template = shipped_template("compact")
    tokenizer.response_template = FORMATS["qwen"].parser()
    return tokenizer


def warm_start(
    model: Qwen3ForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    rows: list[dict[str, Any]],
    steps: int,
    batch_size: int,
    lr: float,
    p_tool: float,
    tool_share: float,
    seed: int,
) -> None:
    """Supervised training on noisy demonstrations: the tool exchange, else a direct guess.

    ``tool_share`` of the demonstrations are tool exchanges, so the model gets many copies to learn from, but the
    token that decides to call is supervised on a subset only, in which a share ``p_tool`` calls: that is the
    rate the model learns to call at.
    """
    rng = random.Random(seed)
    eos = tokenizer.eos_token_id

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        demos = noisy_demonstrations(rng, rows, batch_size, p_tool, tool_share)
        pairs = [labelled_exchange(tokenizer, None, eos, row["prompt"], turns, decide) for row, turns, decide in demos]
        return pad_batch([p[0] for p in pairs], [p[1] for p in pairs], tokenizer.pad_token_id)

    fit_supervised(model, next_batch, steps, lr)


def rates(model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerBase, rows: list[dict[str, Any]], seed: int) -> dict:
    """:func:`~infgrpo.builds.exchanges.measure` of the compact template's model (``parse_tool_call`` as the stricter
    reading of a call)."""
    eos = tokenizer.eos_token_id
    return measure(
        model, tokenizer, None, rows, seed, [eos], lambda ids: parse_tool_call(tokenizer.decode(ids)) is not None
    )


def main(argv: list[str] | None = None) -> None:
    """Builds the tool tokenizer, the calculator splits and the warm-started model (see the module docstring)."""
    ap = tool_build_parser(__doc__, 0.3, 0.9, steps=1000, batch_size=32, lr=8e-3, n_train=4000, n_eval=200)
    args = ap.parse_args(argv)
    model_dir = args.out / "tiny-qwen3-tools" if args.out else TINY_TOOLS_MODEL_DIR
    data_dir = args.out / "tiny-data" if args.out else TINY_DATA_DIR
    held = make_split(args.n_eval, seed=args.seed + 1, split="eval")
    if args.measure_only:
        model = Qwen3ForCausalLM.from_pretrained(model_dir)
        print(rates(model, PreTrainedTokenizerFast.from_pretrained(model_dir), held, args.seed))
        return
    start = time.perf_counter()
    # 1) tokenizer with the tool template
    tokenizer = tools_tokenizer()
    # 2) data splits
    train = make_split(args.n_train, seed=args.seed, split="train")
    write_jsonl(data_dir / "calculator-train.jsonl", train)
    write_jsonl(data_dir / "calculator-eval.jsonl", held)
    # 3) model
    torch.manual_seed(args.seed)
    model = Qwen3ForCausalLM(tiny_config(len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id))
    # 4) warm start on noisy demonstrations
    warm_start(model, tokenizer, train, args.steps, args.batch_size, args.lr, args.p_tool, args.tool_share, args.seed)
    save_model(model, tokenizer, model_dir)
    print(f"wrote {data_dir}; built in {time.perf_counter() - start:.0f} s")
    # 5) what GRPO starts from
    print(rates(model, tokenizer, held, args.seed))


if __name__ == "__main__":
    main()
