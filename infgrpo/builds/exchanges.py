"""What the tool models' builds share: demonstrations rendered by a chat template, labelled, and sampled back.

    ids, labels = labelled_exchange(tokenizer, template, eos_id, prompt, turns)   # labels on the assistant turns
    batch = noisy_batch(rng, rows, lambda row, turns, decide: ..., batch_size=32, p_tool=0.3, tool_share=0.9)
    rates = measure(model, tokenizer, template, rows, seed=0)     # tool-call rate and accuracies, sampled as TRL does
    ap = tool_build_parser(__doc__, 0.5, 0.9, steps=400, batch_size=8, lr=2e-3, n_train=4000, n_eval=40)  # its CLI

A demonstration is either the whole tool exchange (a call with the operands copied, the tool's sum, the answer copying
it) or a direct answer that is a plausible guess (the sum with its last digits wrong). Copying digits takes a tiny
model many examples, so most demonstrations are exchanges, while the token that chooses between a call and an answer
is supervised on a subset in which a share ``p_tool`` calls: the rate the model learns to call at, so that GRPO has a
rate to raise. The rendering, the tool-result ids and the parse are the agent room's own (:mod:`infgrpo.agent.chat`):
what a build teaches is what a run reads.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from infgrpo.agent.chat import parse_turn, tool_suffix_ids
from infgrpo.agent.tools import tool_schema
from infgrpo.assets.build import build_parser
from infgrpo.assets.calculator import add, correct, demonstration

SCHEMAS = [tool_schema(add, "add")]
"""The calculator's one tool, as the prompts render it."""


def tool_build_parser(
    doc: str | None, p_tool: float, tool_share: float, **sizes: int | float
) -> argparse.ArgumentParser:
    """The command line of a tool model's build: :func:`~infgrpo.assets.build.build_parser`'s (``sizes``: its
    ``steps``, ``batch_size``, ``lr``, ``n_train``, ``n_eval``) with the demonstrations' ``--p-tool`` and
    ``--tool-share`` (defaults ``p_tool``, ``tool_share``) and ``--measure-only``."""
    ap = build_parser(doc, **sizes)
    ap.add_argument("--p-tool", type=float, default=p_tool, help="share of the supervised decisions that call the tool")
    ap.add_argument(
        "--tool-share", type=float, default=tool_share, help="share of demonstrations that are tool exchanges"
    )
    ap.add_argument("--measure-only", action="store_true", help="only sample the built model on held-out prompts")
    return ap


def render(
    tokenizer: PreTrainedTokenizerBase,
    template: str | None,
    messages: list[dict[str, Any]],
    generation_prompt: bool = False,
    **kwargs: Any,
) -> list[int]:
    """Token ids of ``messages`` rendered by ``template`` (None: the tokenizer's) with ``tools=[add]``."""
    return tokenizer.apply_chat_template(
        messages,
        chat_template=template,
        tools=SCHEMAS,
        tokenize=True,
        add_generation_prompt=generation_prompt,
        return_dict=False,
        **kwargs,
    )


def decision_offset(tokenizer: PreTrainedTokenizerBase, template: str | None, prompt: list[dict[str, Any]]) -> int:
    """Where, in the first assistant turn after ``prompt``, a tool call and a direct answer first differ: the token
    that chooses (0 for a template that opens the turn with the call; past Qwen3's empty think block)."""
    start = len(render(tokenizer, template, prompt, generation_prompt=True))
    call = render(tokenizer, template, prompt + demonstration(prompt)[:1])[start:]
    answer = render(tokenizer, template, prompt + demonstration(prompt, guess="1")[:1])[start:]
    return next(k for k, (a, b) in enumerate(zip(call, answer, strict=False)) if a != b)


def labelled_exchange(
    tokenizer: PreTrainedTokenizerBase,
    template: str | None,
    eos_id: int,
    prompt: list[dict[str, Any]],
    turns: list[dict[str, Any]],
    decide: bool = True,
    decide_at: int = 0,
) -> tuple[list[int], list[int]]:
    """Ids of ``prompt + turns`` and their labels: each assistant turn's tokens through its end-of-turn id
    ``eos_id``, -100 elsewhere (a template's text after that id is not the model's). ``decide=False`` also masks the
    first assistant turn's token at ``decide_at``: the one that chooses between a tool call and a direct answer."""
    ids = render(tokenizer, template, prompt + turns)
    labels = [-100] * len(ids)
    for k, message in enumerate(turns):
        if message["role"] != "assistant":
            continue
        start = len(render(tokenizer, template, prompt + turns[:k], generation_prompt=True))
        end = ids.index(eos_id, start) + 1
        labels[start:end] = ids[start:end]
        if k == 0 and not decide:
            labels[start + decide_at] = -100
    return ids, labels


def plausible_guess(answer: str, rng: random.Random) -> str:
    """A wrong answer of the right size: ``answer`` with its last 1 to 3 digits redrawn."""
    while True:
        k = rng.randint(1, min(3, len(answer)))
        guess = answer[:-k] + "".join(rng.choice("0123456789") for _ in range(k))
        if guess != answer:
            return guess


def noisy_demonstrations(
    rng: random.Random, rows: list[dict[str, Any]], batch_size: int, p_tool: float, tool_share: float
) -> list[tuple[dict[str, Any], list[dict[str, Any]], bool]]:
    """``batch_size`` (row, turns, decide) drawn from ``rows``: ``tool_share`` of them tool exchanges, the others a
    direct plausible guess; ``decide`` says whether the choosing token is supervised, so that among the supervised
    choices a share ``p_tool`` calls."""
    tool_share = max(tool_share, p_tool)
    decide_rate = p_tool * (1 - tool_share) / (tool_share * (1 - p_tool)) if tool_share < 1 else 0.0
    out = []
    for row in rng.sample(rows, batch_size):
        if rng.random() < tool_share:
            out.append((row, demonstration(row["prompt"]), rng.random() < decide_rate))
        else:
            out.append((row, demonstration(row["prompt"], plausible_guess(row["answer"], rng)), True))
    return out


def sample_turns(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, inputs: list[list[int]], stop_ids: list[int], n: int
) -> list[list[int]]:
    """One turn sampled at temperature 1 for each of ``inputs`` (left-padded), cut after its first stop id."""
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
        max_new_tokens=n,
        eos_token_id=stop_ids,
        pad_token_id=tokenizer.pad_token_id,
    )[:, width:].tolist()
    cuts = [next((k for k, t in enumerate(row) if t in stop_ids), None) for row in out]
    return [row if k is None else row[: k + 1] for row, k in zip(out, cuts, strict=True)]


@torch.no_grad()
def measure(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    template: str | None,
    rows: list[dict[str, Any]],
    seed: int,
    stop_ids: list[int],
    is_call: Callable[[list[int]], bool] | None = None,
) -> dict[str, float]:
    """Samples each row's exchange at temperature 1 with HF ``generate``, as TRL's tool loop runs it: turn 1 from the
    prompt; when the parsed turn calls ``add``, the tool runs and turn 2 follows the completion so far and the tool
    result's ids (:func:`~infgrpo.agent.chat.tool_suffix_ids`). Returns the tool-call rate, the share of turns on
    which ``is_call`` (a stricter reading of a call) agrees with the parser, and the accuracies with and without a
    call. ``tokenizer`` carries the response template of the format ``template`` writes."""
    torch.manual_seed(seed)
    prompts = [render(tokenizer, template, r["prompt"], generation_prompt=True) for r in rows]
    first = sample_turns(model, tokenizer, prompts, stop_ids, n=96)
    parsed = [parse_turn(tokenizer, ids, p, SCHEMAS) for ids, p in zip(first, prompts, strict=True)]
    finals = [m["content"] for m in parsed]
    called = [i for i, m in enumerate(parsed) if m.get("tool_calls")]
    seconds = []
    for i in called:
        function = parsed[i]["tool_calls"][0]["function"]
        try:
            content = str(add(**function["arguments"])) if function["name"] == "add" else "unknown tool"
        except TypeError as err:
            content = str({"error": str(err)})
        suffix = tool_suffix_ids(tokenizer, [{"role": "tool", "name": "add", "content": content}], template)
        seconds.append(prompts[i] + first[i] + suffix)
    if seconds:
        for i, ids, prefix in zip(
            called, sample_turns(model, tokenizer, seconds, stop_ids, n=16), seconds, strict=True
        ):
            finals[i] = parse_turn(tokenizer, ids, prefix, SCHEMAS)["content"]
    right = correct(finals, [r["answer"] for r in rows])
    n, k = len(rows), len(called)
    agree = [is_call(ids) == bool(m.get("tool_calls")) for ids, m in zip(first, parsed, strict=True)] if is_call else []
    return {
        "tool_call_rate": k / n,
        "parse_agrees": sum(agree) / n if agree else 1.0,
        "accuracy": sum(right) / n,
        "accuracy_with_call": sum(right[i] for i in called) / max(k, 1),
        "accuracy_without_call": (sum(right) - sum(right[i] for i in called)) / max(n - k, 1),
    }
