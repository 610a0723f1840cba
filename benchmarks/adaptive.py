"""Adaptive groups against fixed groups and dynamic sampling, on the same engine, prompts and random streams.

    python -m benchmarks adaptive --model smollm2 --steps 8 --threads 1 --json benchmarks/adaptive_smollm2.json
    python -m benchmarks adaptive --model tiny --steps 1 --prompts 2 --group-size 4 --num-slots 8   # seconds

Each step hands every variant the same ``--prompts`` prompts (then, for the drawing variants, the same seeded
stream of the task's training prompts) and the same seed, so a prompt's sample j is the same completion in
every variant. The variants (each with its own sampler: its length predictor and learned rates):

- ``plain``: ``--group-size`` samples of each prompt;
- ``dynamic``: dynamic sampling (prompts drawn as slots free up, groups without spread dropped, cap 4 x prompts);
- ``uniform`` / ``value``: adaptive groups with that allocation rule (``--cap`` samples a prompt at most,
  ``--budget`` samples a step, the update's ``--group-size`` picked by PODS's max-variance rule);
- ``dynamic+value``: both (extend first, drop what cannot grow, draw while the budget holds a group);
- ``dynamic+value_or_draw``: both, a stalled group dropped for a new prompt once a fresh group is likelier to
  carry a gradient per token than its extension (rule ``value_or_draw``).

Per variant, over the steps: the groups trained on that carry a gradient (reward spread in the rows trained
on), those rescued (no spread in the first ``--group-size`` samples, a spread after extension), right answers
found on prompts whose first ``--group-size`` had none, decoded tokens, decode steps, wall-clock; and the
ratios the issue's targets name: informative groups per 1,000 decoded tokens (against dynamic's and plain's),
rescued groups per 1,000 tokens (value against uniform), decode steps per informative group. The variants
alternate step by step in one process, one thread. The judge is the training step's
(:class:`~infgrpo.training.judged_rollout.GroupJudge`: the recipe's reward, ``reward_spread``).
"""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Any

import torch

from benchmarks.dynamic import JOBS, setup
from benchmarks.harness import Benchmark
from benchmarks.table import markdown_table, ratio
from infgrpo.runtime.seeds import derive_seed
from infgrpo.sampler.schedule.sequence import Sequence

VARIANTS = ("plain", "dynamic", "uniform", "value", "dynamic+value", "dynamic+value_or_draw")
RULES = {"uniform": "uniform", "value": "value", "dynamic+value": "value", "dynamic+value_or_draw": "value_or_draw"}
"""The adaptive variants and their ``adaptive_groups.rule``."""


def add_args(ap: argparse.ArgumentParser) -> None:
    """The job (the SmolLM2 CPU recipe's rollout by default) and the comparison's size."""
    ap.add_argument("--model", default="smollm2", choices=sorted(JOBS), help="the recipe's model and task")
    ap.add_argument("--steps", type=int, default=8, help="rollouts per variant")
    ap.add_argument("--prompts", type=int, default=4, help="prompts (groups trained on) a step: data.batch_size")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--num-slots", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--cap", type=int, default=64, help="adaptive_groups.max_samples_per_prompt")
    ap.add_argument("--budget", type=int, default=None, help="samples a step (default: 4 x prompts x group size)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)


def run(args: argparse.Namespace) -> dict:
    """Every step with every variant, alternating; rows of per-step counts and the summary per variant."""
    from infgrpo import MicroGroupSampler, SamplerConfig
    from infgrpo.rewards import correct_answers
    from infgrpo.sampler import DynamicSpec
    from infgrpo.scoring import Scorer
    from infgrpo.training.adaptive import AdaptiveGroupsConfig
    from infgrpo.training.judged_rollout import GroupJudge

    model, tok, items, reward = setup(args)
    g, b = args.group_size, args.prompts
    budget = args.budget or 4 * b * g
    longest = max(len(it["prompt_ids"]) for it in items)
    cfg = SamplerConfig(num_slots=args.num_slots, max_new_tokens=args.max_new_tokens)
    scorer = Scorer(tok, {reward: 1.0}, "raise", args.max_new_tokens)
    samplers = {v: MicroGroupSampler(model, tok, cfg) for v in args.variants}
    rows = []
    for step in range(args.steps):
        order = torch.randperm(len(items), generator=torch.Generator().manual_seed(step)).tolist()
        stream = [items[i] for i in order]
        seed = derive_seed(0, step)
        for variant in args.variants:
            sampler, drawn = samplers[variant], []
            judge = GroupJudge(scorer, "reward_spread", drawn if "dynamic" in variant else stream[:b])
            grow = None
            if variant in RULES:
                adaptive = AdaptiveGroupsConfig(True, args.cap, budget, RULES[variant])
                grow = adaptive.spec(judge, g, b)
            start = time.perf_counter()
            if "dynamic" in variant:

                def source(stream: list[dict] = stream, drawn: list = drawn) -> Any:
                    for item in itertools.islice(stream, 4 * b):
                        drawn.append(item)
                        yield item["prompt_ids"]

                spec = DynamicSpec(b, 4 * b, judge.spread)
                out = sampler.sample_dynamic(source(), g, seed, spec, longest, adaptive=grow)
                chosen = out.drawn
            else:
                out = sampler.sample([it["prompt_ids"] for it in stream[:b]], g, seed, adaptive=grow)
                chosen = list(range(b))
            wall = time.perf_counter() - start
            if variant == "plain":  # nothing judged it while it decoded: the same judge, afterwards
                for k in chosen:
                    rows_k = range(k * g, (k + 1) * g)
                    judge.spread(k, [Sequence(k, r - k * g, token_ids=out.completion_ids[r], logprobs=out.logprobs[r],
                                              finish_reason=out.finish_reasons[r]) for r in rows_k])  # fmt: skip
            rows.append(count(step, variant, out, judge, chosen, g, wall, correct_answers, reward))
    return {"job": vars(args) | {"budget": budget}, "rows": rows, "summary": summary(rows, args.variants)}


def count(step: int, variant: str, out: Any, judge: Any, chosen: list[int], g: int, wall: float, correct: Any,
          reward: str) -> dict:  # fmt: skip
    """One variant's step: informative and rescued groups trained on, right answers found, costs."""
    informative = rescued = found = none_at_g = 0
    for k, i in enumerate(chosen):
        scores = judge.scored[i]
        total = scores.total
        ids = out.sample_ids[k * g : (k + 1) * g]
        trained = total[ids]
        spread = bool(trained.max() > trained.min())
        informative += spread
        first = total[:g]
        rescued += spread and not bool(first.max() > first.min())
        right = correct(scores.parts[reward])
        if right[:g].sum() == 0:
            none_at_g += 1
            found += int(right[g:].sum())
    st = out.stats
    return {
        "step": step, "variant": variant, "informative": informative, "rescued": rescued,
        "right_found": found, "no_right_at_g": none_at_g, "generated_tokens": st["generated_tokens"],
        "decode_steps": st["decode_steps"], "wall_s": wall,
        "samples_per_prompt_max": out.adaptive.samples_per_prompt_max if out.adaptive is not None else g,
    }  # fmt: skip


def summary(rows: list[dict], variants: list[str]) -> list[dict]:
    """Per variant: sums over the steps and the rates per 1,000 decoded tokens."""
    out = []
    for v in variants:
        mine = [r for r in rows if r["variant"] == v]
        keys = ("informative", "rescued", "right_found", "no_right_at_g", "generated_tokens", "decode_steps",
                "wall_s")  # fmt: skip
        total = {k: sum(r[k] for r in mine) for k in keys}
        kilo = max(total["generated_tokens"], 1) / 1000
        total.update(
            variant=v, steps=len(mine), informative_per_1k=total["informative"] / kilo,
            rescued_per_1k=total["rescued"] / kilo,
            steps_per_informative=total["decode_steps"] / max(total["informative"], 1),
            samples_per_prompt_max=max(r["samples_per_prompt_max"] for r in mine),
        )  # fmt: skip
        out.append(total)
    return out


def tables(result: dict) -> str:
    """The summary, the target ratios and the per-step rows."""
    s = {r["variant"]: r for r in result["summary"]}

    def f(key: str, digits: int = 2) -> Any:
        return lambda r: f"{r[key]:.{digits}f}"

    cols = [
        ("variant", lambda r: r["variant"]), ("informative groups", lambda r: r["informative"]),
        ("rescued", lambda r: r["rescued"]), ("right answers found (prompts with none at G)",
                                              lambda r: f"{r['right_found']} ({r['no_right_at_g']})"),
        ("decoded tokens", lambda r: r["generated_tokens"]), ("informative / 1k tokens", f("informative_per_1k")),
        ("rescued / 1k tokens", f("rescued_per_1k")), ("decode steps / informative", f("steps_per_informative", 1)),
        ("samples a prompt, max", lambda r: r["samples_per_prompt_max"]), ("wall s", f("wall_s", 1)),
    ]  # fmt: skip
    lines = [markdown_table(cols, result["summary"]), ""]
    best = s.get("value")
    if best is not None:
        for base in ("dynamic", "plain"):
            if base in s:
                lines.append(
                    f"value / {base}, informative groups per 1,000 decoded tokens: "
                    f"{ratio(best['informative_per_1k'], s[base]['informative_per_1k'])}"
                )
        if "uniform" in s:
            lines.append(
                f"value / uniform, rescued groups per 1,000 decoded tokens: "
                f"{ratio(best['rescued_per_1k'], s['uniform']['rescued_per_1k'])}"
            )
    for mine in ("dynamic+value", "dynamic+value_or_draw"):
        if mine in s and "dynamic" in s:
            lines.append(
                f"{mine} / dynamic, informative groups per 1,000 decoded tokens: "
                f"{ratio(s[mine]['informative_per_1k'], s['dynamic']['informative_per_1k'])}"
            )
    names = ("step", "variant", "informative", "rescued", "right_found", "generated_tokens", "decode_steps", "wall_s")
    lines += ["", markdown_table([(k, lambda r, k=k: f"{r[k]:.2f}" if isinstance(r[k], float) else r[k])
                                  for k in names], result["rows"])]  # fmt: skip
    return "\n".join(lines)


BENCH = Benchmark("adaptive", __doc__, add_args, run, tables, threads=1)


def main(argv: list[str] | None = None) -> dict:
    """``python -m benchmarks adaptive``."""
    return BENCH.main(argv)
