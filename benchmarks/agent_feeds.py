"""``bench agent``'s feeds part: dynamic sampling and adaptive groups with tools, each beside the plain rollout.

    python -m benchmarks agent --parts feeds --json benchmarks/agent_feeds_tiny_tools.json

The shipped tool-calling model on the calculator task's training prompts (``configs/agent-calculator.yaml``'s model,
data, reward, ``max_new_tokens`` 160, ``max_turns`` 2, temperature 1, 16 slots), with ``agent.tools: [add]``. Each
step draws a batch of ``--feed-prompts`` prompts (a seeded permutation of the training split); the three schemes
decode it with the same seed, one after the other, each on its own sampler (each learns its own rates):

- ``plain``: the batch x G, scored (``GRPOModule.rollout`` without a judge);
- ``dynamic``: ``model.dynamic_sampling`` (DAPO's filter, judged in the engine as each group's last turn ends):
  the batch, then the data module's prompt stream, until ``--feed-prompts`` groups have a reward spread (cap
  ``4 x`` the batch);
- ``adaptive``: ``model.adaptive_groups`` (a group without a spread gets more samples, up to 32 a prompt; the
  step trains on the G of largest reward variance).

Per scheme, summed over the steps: informative groups trained on (groups whose trained rewards are not all
equal), the tokens the model generated (every sample decoded: dropped groups, extensions and cancelled samples
included; tool results not), informative groups per 1,000 tokens, tokens per informative group, tool calls and
wall seconds (one process, one thread).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from benchmarks.table import markdown_table

SCHEMES = ("plain", "dynamic", "adaptive")
REWARD = "infgrpo.assets.calculator:correct"
TOOL = "infgrpo.assets.calculator:add"


def add_args(ap: argparse.ArgumentParser) -> None:
    """The feeds part's size."""
    ap.add_argument("--feed-steps", type=int, default=6, help="feeds: rollouts per scheme")
    ap.add_argument("--feed-prompts", type=int, default=8, help="feeds: prompts a batch (informative groups a step)")
    ap.add_argument("--feed-group", type=int, default=8, help="feeds: G")
    ap.add_argument("--feed-slots", type=int, default=16, help="feeds: num_slots")


def config(args: argparse.Namespace, common: dict) -> dict:
    """The feeds part's configuration (one child process)."""
    return {
        **common, "part": "feeds", "steps": args.feed_steps, "prompts": args.feed_prompts,
        "group_size": args.feed_group, "slots": args.feed_slots,
    }  # fmt: skip


def has_spread(values: torch.Tensor) -> bool:
    """Whether a group's rewards (G,) are not all equal (NaN left out): a non-zero gradient."""
    values = values[~values.isnan()]
    return bool(len(values) > 1 and values.max() > values.min())


def run(cfg: dict) -> dict:
    """Every step with the three schemes, in turn; rows of per-step counts and the summary per scheme."""
    from infgrpo.agent import AgentConfig
    from infgrpo.data import PromptDataModule
    from infgrpo.policy.load import load_policy, load_tokenizer
    from infgrpo.runtime.ranks import Ranks
    from infgrpo.runtime.seeds import derive_seed
    from infgrpo.sampler import MicroGroupSampler, SamplerConfig
    from infgrpo.scoring import Scorer
    from infgrpo.training.adaptive import AdaptiveGroupsConfig
    from infgrpo.training.agent_rollout import AgentRollout, rollout_inputs
    from infgrpo.training.dynamic import DynamicSamplingConfig
    from infgrpo.training.judged_rollout import JudgedRollout

    g, b = cfg["group_size"], cfg["prompts"]
    model = load_policy(cfg["model"], dtype="float32").eval()
    tok = load_tokenizer(cfg["model"])
    agent = AgentRollout(AgentConfig(tools=[TOOL], max_turns=cfg["max_turns"]), tok, g)
    data = PromptDataModule(tokenizer=cfg["model"], train_split="calculator-train", eval_split=None, batch_size=b)
    data.setup("fit")
    data.use_tools(agent.schemas, agent.template)  # as GRPOModule.setup does
    scorer = Scorer(tok, {REWARD: 1.0}, "raise", cfg["max_new_tokens"], sources=agent.sources)
    sampler_cfg = SamplerConfig(num_slots=cfg["slots"], max_new_tokens=cfg["max_new_tokens"], temperature=1.0)
    samplers = {s: MicroGroupSampler(model, tok, sampler_cfg) for s in SCHEMES}
    grow = AdaptiveGroupsConfig(enabled=True, max_samples_per_prompt=32)
    judged: dict[str, Any] = {
        "dynamic": JudgedRollout(DynamicSamplingConfig(enabled=True), AdaptiveGroupsConfig(), samplers["dynamic"],
                                 scorer, g, REWARD, agent),
        "adaptive": JudgedRollout(DynamicSamplingConfig(), grow, samplers["adaptive"], scorer, g, REWARD, agent),
    }  # fmt: skip
    rows = []
    for step in range(cfg["steps"]):
        order = torch.randperm(len(data.train_items), generator=torch.Generator().manual_seed(step)).tolist()
        batch = [data.train_items[i] for i in order[:b]]
        seed = derive_seed(0, step)
        for scheme in SCHEMES:
            start = time.perf_counter()
            if scheme == "plain":
                prompts, turns, _ = rollout_inputs(agent, batch, data)
                rollouts = samplers[scheme].sample(prompts, g, seed, turns=turns)
                scores = scorer(rollouts, batch)
            else:
                rollouts, scores, _ = judged[scheme](batch, seed, data, Ranks())
            wall = time.perf_counter() - start
            groups = scores.total.reshape(-1, g)
            rows.append({
                "step": step, "scheme": scheme, "groups": len(groups),
                "informative": sum(has_spread(x) for x in groups), "tokens": rollouts.stats["generated_tokens"],
                "samples": rollouts.tools.samples, "tool_calls": rollouts.tools.calls, "wall_s": wall,
                "reward": float(scores.total.nanmean()),
            })  # fmt: skip
    agent.close()
    return {**cfg, "rows": rows, "summary": summary(rows)}


def summary(rows: list[dict]) -> list[dict]:
    """Per scheme: sums over the steps, informative groups per 1,000 tokens and tokens per informative group."""
    out = []
    for scheme in SCHEMES:
        mine = [r for r in rows if r["scheme"] == scheme]
        total = {k: sum(r[k] for r in mine) for k in ("groups", "informative", "tokens", "samples", "tool_calls")}
        total["wall_s"] = sum(r["wall_s"] for r in mine)
        total["per_1k_tokens"] = 1000 * total["informative"] / max(total["tokens"], 1)
        total["tokens_per_informative"] = total["tokens"] / max(total["informative"], 1)
        out.append({"scheme": scheme, "steps": len(mine), **total})
    return out


def table(result: dict) -> str:
    """The summary per scheme, with each judged scheme's informative groups per 1,000 tokens over the plain one's."""
    if "summary" not in result:
        return f"feeds: skipped ({result.get('skipped')})"
    plain = next(r for r in result["summary"] if r["scheme"] == "plain")
    cols = [
        ("scheme", lambda r: r["scheme"]), ("informative groups", lambda r: r["informative"]),
        ("groups trained", lambda r: r["groups"]), ("samples decoded", lambda r: r["samples"]),
        ("tokens", lambda r: r["tokens"]), ("informative / 1k tokens", lambda r: f"{r['per_1k_tokens']:.2f}"),
        ("tokens / informative group", lambda r: f"{r['tokens_per_informative']:.0f}"),
        ("x plain", lambda r: f"{r['per_1k_tokens'] / max(plain['per_1k_tokens'], 1e-9):.2f}x"),
        ("tool calls", lambda r: r["tool_calls"]), ("wall s", lambda r: f"{r['wall_s']:.1f}"),
    ]  # fmt: skip
    steps = [("step", lambda r: r["step"]), ("scheme", lambda r: r["scheme"]),
             ("informative", lambda r: r["informative"]), ("tokens", lambda r: r["tokens"]),
             ("samples", lambda r: r["samples"]), ("reward", lambda r: f"{r['reward']:.3f}")]  # fmt: skip
    return markdown_table(cols, result["summary"]) + "\n\n" + markdown_table(steps, result["rows"])
