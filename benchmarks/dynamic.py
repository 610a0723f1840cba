"""Dynamic sampling against verl's rounds, on the same engine, prompts and random streams.

    python -m benchmarks dynamic --model smollm2 --steps 8 --threads 1 --json benchmarks/dynamic_smollm2.json
    python -m benchmarks dynamic --model tiny --steps 2 --prompts 2 --group-size 4 --num-slots 8   # seconds

Each step needs ``--prompts`` informative groups (rewards not all equal) of ``--group-size`` completions.
Both schemes get the same prompts in the same order (the step's batch, then a seeded stream of the task's
training prompts) and the same seed, so a prompt's completions are identical in both (the engine's streams
depend only on seed, position and sample index); they differ in what they decode and when:

- ``rounds`` (verl's ``algorithm.filter_groups``): the batch decoded to its end, filtered, the next batch of
  the stream, ... until enough groups survive (informative groups past the target are trimmed);
- ``continuous`` (``model.dynamic_sampling``): prompts admitted as slots free up, each group judged when it
  ends, the rollout stopped the moment the target is met (in-flight completions cancelled).

Per informative group trained on: decode steps (a GPU's cost: each round waits for its longest completion),
decoded tokens (a CPU's cost), wall-clock seconds, and for ``continuous`` the ideal tokens (kept and dropped
groups' tokens, nothing cancelled). The plain batch (``rounds``' first round) gives the informative groups a
step without dynamic sampling trains on. The schemes alternate step by step in one process, one thread.
"""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Any

import torch

from benchmarks.harness import Benchmark
from benchmarks.table import markdown_table, ratio
from infgrpo.runtime.seeds import derive_seed
from infgrpo.sampler.engine.plan import DynamicSpec

SCHEMES = ("rounds", "continuous")
JOBS = {  # model -> (data module settings, reward)
    "smollm2": (
        dict(path="reasoning_gym:chain_sum", task_config={"min_terms": 2, "max_terms": 2, "max_digits": 2},
             prompt_template="{question} Give only the final answer.", train_size=1000, eval_size=0, eval_split=None),
        "reasoning_gym",
    ),
    "tiny": (dict(path="tiny", eval_split=None), "synthetic"),
}  # fmt: skip


def add_args(ap: argparse.ArgumentParser) -> None:
    """The job (the SmolLM2 CPU recipe's rollout by default) and the comparison's size."""
    ap.add_argument("--model", default="smollm2", choices=sorted(JOBS), help="the recipe's model and task")
    ap.add_argument("--steps", type=int, default=8, help="rollouts per scheme")
    ap.add_argument("--prompts", type=int, default=4, help="informative groups a step needs (data.batch_size)")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--num-slots", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--cap", type=int, default=None, help="max prompts a step (default: 4 x --prompts)")
    ap.add_argument("--refill", default="lpt", help="the engine's refill policy (the sampler's default: lpt)")


def setup(args: argparse.Namespace) -> tuple[Any, Any, list[dict], str]:
    """(policy, tokenizer, the task's training items, the reward's name)."""
    from infgrpo.data import PromptDataModule
    from infgrpo.policy.load import load_policy, load_tokenizer

    data_kw, reward = JOBS[args.model]
    data = PromptDataModule(tokenizer=args.model, batch_size=args.prompts, **data_kw)
    data.setup("fit")
    return load_policy(args.model).eval(), load_tokenizer(args.model), data.train_items, reward


def run(args: argparse.Namespace) -> dict:
    """Every step with both schemes, alternating; rows of per-step counts and the summary per scheme."""
    from infgrpo import MicroGroupSampler, SamplerConfig
    from infgrpo.sampler import Rollouts
    from infgrpo.scoring import score_rollouts

    model, tok, items, reward = setup(args)
    cap = args.cap or 4 * args.prompts
    longest = max(len(it["prompt_ids"]) for it in items)
    cfg = SamplerConfig(num_slots=args.num_slots, max_new_tokens=args.max_new_tokens, refill=args.refill)
    samplers = {scheme: MicroGroupSampler(model, tok, cfg) for scheme in SCHEMES}  # each learns its rates and lengths
    rows = []
    for step in range(args.steps):
        order = torch.randperm(len(items), generator=torch.Generator().manual_seed(step)).tolist()
        prompts = [items[i] for i in order]
        for scheme in SCHEMES:
            sampler, judged = samplers[scheme], []

            def keep(position: int, group: list, prompts: list[dict] = prompts, judged: list = judged) -> bool:
                one = Rollouts([prompts[position]["prompt_ids"]], args.group_size, [s.token_ids for s in group],
                               [s.logprobs for s in group], [s.finish_reason for s in group])  # fmt: skip
                scores = score_rollouts(tok, one, [prompts[position]], {reward: 1.0}, "raise", cfg.max_new_tokens)
                values = scores.total[~scores.total.isnan()]
                judged.append((position, bool(len(values) > 1 and values.max() > values.min())))
                return judged[-1][1]

            spec = DynamicSpec(args.prompts, cap, keep, scheme=scheme, round_size=args.prompts)
            seed = derive_seed(0, step)
            start = time.perf_counter()
            source = iter(p["prompt_ids"] for p in itertools.islice(prompts, cap))
            out = sampler.sample_dynamic(source, args.group_size, seed, spec, longest)
            wall = time.perf_counter() - start
            st = {k.removeprefix("dynamic/"): v for k, v in out.stats.items() if k.startswith("dynamic/")}
            plain = sum(ok for pos, ok in judged if pos < args.prompts)  # the batch alone (rounds' first round)
            rows.append({
                "step": step, "scheme": scheme, "decode_steps": out.stats["decode_steps"],
                "generated_tokens": out.stats["generated_tokens"], "wall_s": wall, "plain_informative": plain, **st,
            })  # fmt: skip
    return {"job": vars(args) | {"cap": cap}, "rows": rows, "summary": summary(rows)}


def summary(rows: list[dict]) -> list[dict]:
    """Per scheme: sums over the steps, and each cost per informative group trained on."""
    out = []
    for scheme in SCHEMES:
        mine = [r for r in rows if r["scheme"] == scheme]
        keys = ("decode_steps", "generated_tokens", "wall_s", "groups_trained", "groups_kept", "groups_dropped",
                "prompts_drawn", "wasted_tokens", "plain_informative", "capped")  # fmt: skip
        total = {k: sum(r[k] for r in mine) for k in keys}
        informative = sum(min(r["groups_kept"], r["groups_trained"]) for r in mine)
        total.update(scheme=scheme, informative=informative, steps=len(mine))
        total["ideal_tokens"] = total["generated_tokens"] - total["wasted_tokens"] if scheme == "continuous" else None
        out.append(total)
    return out


def tables(result: dict) -> str:
    """The summary (costs per informative group, and continuous / rounds) and the per-step rows."""
    s = {r["scheme"]: r for r in result["summary"]}

    def per(key: str) -> Any:
        return lambda r: f"{r[key] / max(r['informative'], 1):.1f}"

    cols = [
        ("scheme", lambda r: r["scheme"]), ("informative groups", lambda r: r["informative"]),
        ("prompts drawn", lambda r: r["prompts_drawn"]), ("capped steps", lambda r: r["capped"]),
        ("decode steps / group", per("decode_steps")), ("tokens / group", per("generated_tokens")),
        ("wall s / group", lambda r: f"{r['wall_s'] / max(r['informative'], 1):.2f}"),
        ("wasted tokens", lambda r: r["wasted_tokens"]),
    ]  # fmt: skip
    main = markdown_table(cols, result["summary"])
    c, r = s["continuous"], s["rounds"]
    inf = max(c["informative"], 1), max(r["informative"], 1)
    lines = [
        main, "",
        f"continuous / rounds, per informative group: decode steps "
        f"{ratio(c['decode_steps'] / inf[0], r['decode_steps'] / inf[1])}, tokens "
        f"{ratio(c['generated_tokens'] / inf[0], r['generated_tokens'] / inf[1])}, wall-clock "
        f"{ratio(c['wall_s'] / inf[0], r['wall_s'] / inf[1])}; continuous tokens / its ideal (nothing cancelled) "
        f"{ratio(c['generated_tokens'], c['ideal_tokens'])}",
        f"without dynamic sampling a step trains on {r['plain_informative'] / max(r['steps'], 1):.2f} informative "
        f"groups of {result['job']['prompts']} (the batch alone)", "",
    ]  # fmt: skip

    def show(k: str) -> Any:
        return lambda row: f"{row[k]:.2f}" if isinstance(row[k], float) else row[k]

    names = ("step", "scheme", "prompts_drawn", "groups_kept", "groups_dropped", "decode_steps", "generated_tokens",
             "wasted_tokens", "wall_s")  # fmt: skip
    step_cols = [(k, show(k)) for k in names]
    return "\n".join([*lines, markdown_table(step_cols, result["rows"])])


BENCH = Benchmark("dynamic", __doc__, add_args, run, tables, threads=1)


def main(argv: list[str] | None = None) -> dict:
    """``python -m benchmarks dynamic``."""
    return BENCH.main(argv)
