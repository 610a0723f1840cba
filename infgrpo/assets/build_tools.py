"""Builds the tool-calling tiny model: the tiny Qwen3 warm-started to call a calculator on large sums.

    python -m infgrpo.assets.build_tools            # writes infgrpo/assets/tiny-qwen3-tools and tiny-data/calculator-*
    python -m infgrpo.assets.build_tools --steps 20 --out /tmp/tools   # a quick smoke build
    python -m infgrpo.assets.build_tools --measure-only   # samples the shipped model and prints its rates

Steps: 1) the character tokenizer of :mod:`infgrpo.assets.build`, given the compact tool template
(``infgrpo/agent/templates/compact.jinja``) and a response template for ``tokenizer.parse_response``; 2) the
train / held-out splits of :mod:`infgrpo.assets.calculator`; 3) the tiny architecture; 4) a supervised warm start
on *noisy* demonstrations rendered by the real template with ``tools=[add]``: either the whole tool exchange (call
with the operands copied, the tool's sum, the answer copying it) or a direct answer that is a plausible guess (the
sum with its last digits wrong). The loss covers the assistant tokens only. Copying digits takes the model many
examples, so ``tool_share`` (0.9) of the demonstrations are exchanges, while the one token that chooses between a
call and an answer is supervised on a subset in which ``p_tool`` (0.3) call. 5) the model is sampled at
temperature 1 on held-out prompts: it calls the tool in about ``p_tool`` of its samples and answers right more
often when it does, so GRPO with the ``correct`` reward has a tool-call rate to raise. Everything is seeded, so a
rebuild gives the same files on the same torch version (about 7 minutes on one CPU thread).
"""

from __future__ import annotations

import random
import time
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast, Qwen3ForCausalLM

from infgrpo.assets import ASSETS_DIR, TINY_DATA_DIR, TINY_TOOLS_MODEL_DIR
from infgrpo.assets.build import build_parser, fit_supervised, pad_batch, save_model, tiny_config, write_jsonl
from infgrpo.assets.calculator import add, correct, demonstration, make_split, parse_tool_call
from infgrpo.assets.tokenizer import build_tokenizer

COMPACT_TEMPLATE = ASSETS_DIR.parent / "agent" / "templates" / "compact.jinja"
"""The chat template that renders tools, tool calls and tool results within the tiny model's 256 positions."""

RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}
"""How ``tokenizer.parse_response`` reads an assistant turn: Qwen's ``<tool_call>`` JSON blocks, then the text."""


def tools_tokenizer() -> PreTrainedTokenizerFast:
    """The character tokenizer with the compact tool template and the response template set."""
    tokenizer = build_tokenizer()
    tokenizer.chat_template = COMPACT_TEMPLATE.read_text()
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


def render(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], generation_prompt: bool = False
) -> list[int]:
    """Token ids of ``messages`` rendered by the tokenizer's chat template with ``tools=[add]``."""
    return tokenizer.apply_chat_template(
        messages, tools=[add], tokenize=True, add_generation_prompt=generation_prompt, return_dict=False
    )


def labelled_exchange(
    tokenizer: PreTrainedTokenizerBase,
    prompt: list[dict[str, Any]],
    turns: list[dict[str, Any]],
    decide: bool = True,
) -> tuple[list[int], list[int]]:
    """Ids of ``prompt + turns`` and their labels: the assistant turns' tokens through ``<|im_end|>``, else -100.

    ``decide=False`` also masks the first token of the first assistant turn: the one that chooses between a
    tool call (``<tool_call>``) and a direct answer.
    """
    ids = render(tokenizer, prompt + turns)
    labels = [-100] * len(ids)
    for k, message in enumerate(turns):
        if message["role"] != "assistant":
            continue
        start = len(render(tokenizer, prompt + turns[:k], generation_prompt=True))
        end = len(render(tokenizer, prompt + turns[: k + 1])) - 1  # the "\n" after <|im_end|> is the template's
        labels[start + (k == 0 and not decide) : end] = ids[start + (k == 0 and not decide) : end]
    return ids, labels


def plausible_guess(answer: str, rng: random.Random) -> str:
    """A wrong answer of the right size: ``answer`` with its last 1 to 3 digits redrawn."""
    while True:
        k = rng.randint(1, min(3, len(answer)))
        guess = answer[:-k] + "".join(rng.choice("0123456789") for _ in range(k))
        if guess != answer:
            return guess


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
    tool_share = max(tool_share, p_tool)
    decide_rate = p_tool * (1 - tool_share) / (tool_share * (1 - p_tool)) if tool_share < 1 else 0.0

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        pairs = []
        for row in rng.sample(rows, batch_size):
            if rng.random() < tool_share:
                turns, decide = demonstration(row["prompt"]), rng.random() < decide_rate
            else:
                turns, decide = demonstration(row["prompt"], plausible_guess(row["answer"], rng)), True
            pairs.append(labelled_exchange(tokenizer, row["prompt"], turns, decide))
        return pad_batch([p[0] for p in pairs], [p[1] for p in pairs], tokenizer.pad_token_id)

    fit_supervised(model, next_batch, steps, lr)


def _sample(
    model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerBase, inputs: list[list[int]], max_new_tokens: int
) -> list[list[int]]:
    """One turn sampled at temperature 1 for each of ``inputs`` (left-padded), cut after its ``<|im_end|>``."""
    width = max(len(x) for x in inputs)
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(x)) + x for x in inputs])  # (B, T)
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in inputs])
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )[:, width:].tolist()
    eos = tokenizer.eos_token_id
    return [row[: row.index(eos) + 1] if eos in row else row for row in out]


def _parse_response(tokenizer: PreTrainedTokenizerBase, ids: list[int], prompt: list[int]) -> dict[str, Any]:
    """``tokenizer.parse_response`` of one turn; ``{}`` where it fails (TRL then keeps the turn as plain text)."""
    try:
        return tokenizer.parse_response(ids, prefix=prompt, tools=[add]) or {}
    except (ValueError, TypeError):
        return {}


@torch.no_grad()
def measure(
    model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerBase, rows: list[dict[str, Any]], seed: int
) -> dict[str, float]:
    """Samples each row's exchange at temperature 1 with HF ``generate``, the way TRL's tool loop runs it.

    Turn 1 from the prompt; when it is a well-formed call, the tool runs and turn 2 is sampled after the
    completion so far plus the tool-result suffix (the newline after ``<|im_end|>``, the tool message and the
    generation prompt, as TRL's ``_get_tool_suffix_ids`` cuts it). Returns the tool-call rate, the share of
    calls that ``tokenizer.parse_response`` also reads as calls, and the accuracies with and without a call.
    """
    torch.manual_seed(seed)
    prompts = [render(tokenizer, r["prompt"], generation_prompt=True) for r in rows]
    first = _sample(model, tokenizer, prompts, max_new_tokens=96)
    calls = [parse_tool_call(tokenizer.decode(ids)) for ids in first]
    parsed = [_parse_response(tokenizer, ids, p) for ids, p in zip(first, prompts, strict=True)]
    finals = [tokenizer.decode(ids, skip_special_tokens=True) for ids in first]
    called = [i for i, call in enumerate(calls) if call is not None]
    if called:
        seconds = []
        for i in called:
            try:
                content = str(add(**calls[i]["arguments"])) if calls[i]["name"] == "add" else "unknown tool"
            except TypeError as err:
                content = str({"error": str(err)})
            call_msg = {"role": "assistant", "content": "", "tool_calls": [{"function": calls[i]}]}
            prefix = render(tokenizer, rows[i]["prompt"] + [call_msg])
            full = render(tokenizer, rows[i]["prompt"] + [call_msg, {"role": "tool", "content": content}], True)
            cut = len(prefix) - prefix[::-1].index(tokenizer.eos_token_id)  # through the last <|im_end|>
            seconds.append(prompts[i] + first[i] + full[cut:])
        for i, ids in zip(called, _sample(model, tokenizer, seconds, max_new_tokens=16), strict=True):
            finals[i] = tokenizer.decode(ids, skip_special_tokens=True)
    right = correct(finals, [r["answer"] for r in rows])
    n, k = len(rows), len(called)
    agree = [bool(p.get("tool_calls")) == (c is not None) for p, c in zip(parsed, calls, strict=True)]
    return {
        "tool_call_rate": k / n,
        "parse_response_agrees": sum(agree) / n,
        "accuracy": sum(right) / n,
        "accuracy_with_call": sum(right[i] for i in called) / max(k, 1),
        "accuracy_without_call": (sum(right) - sum(right[i] for i in called)) / max(n - k, 1),
    }


def main(argv: list[str] | None = None) -> None:
    """Builds the tool tokenizer, the calculator splits and the warm-started model (see the module docstring)."""
    ap = build_parser(__doc__, steps=1000, batch_size=32, lr=8e-3, n_train=4000, n_eval=200)
    ap.add_argument("--p-tool", type=float, default=0.3, help="share of the supervised decisions that call the tool")
    ap.add_argument("--tool-share", type=float, default=0.9, help="share of demonstrations that are tool exchanges")
    ap.add_argument("--measure-only", action="store_true", help="only sample the built model on the held-out split")
    args = ap.parse_args(argv)
    model_dir = args.out / "tiny-qwen3-tools" if args.out else TINY_TOOLS_MODEL_DIR
    data_dir = args.out / "tiny-data" if args.out else TINY_DATA_DIR
    held = make_split(args.n_eval, seed=args.seed + 1, split="eval")
    if args.measure_only:
        model = Qwen3ForCausalLM.from_pretrained(model_dir)
        print(measure(model, PreTrainedTokenizerFast.from_pretrained(model_dir), held, args.seed))
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
    print(measure(model, tokenizer, held, args.seed))


if __name__ == "__main__":
    main()
