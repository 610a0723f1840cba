"""Tool-using rollouts: memory against the group size with a sleeping tool, and wall time against TRL 1.16's loop.

    python -m benchmarks agent --json benchmarks/agent_tiny_tools.json
    python -m benchmarks agent --groups 4 --latency-prompts 2 --latency-group 4 --repeats 1   # the wiring, in seconds
    python -m benchmarks agent --parts feeds --json benchmarks/agent_feeds_tiny_tools.json     # benchmarks.agent_feeds
    python -m benchmarks agent --parts resume --json benchmarks/agent_resume_tiny_tools.json   # benchmarks.agent_resume

The model is the shipped tool-calling tiny model (``infgrpo/assets/tiny-qwen3-tools``, ``--model``) on the calculator
task's held-out prompts, with ``benchmarks.agent_tools:add`` as its tool (:mod:`benchmarks.agent_tools`), sampled at
temperature 1. Each configuration runs in a fresh process (``--threads``, default 1).

1. **memory**: one rollout of ``--prompts`` prompts x G for each G of ``--groups`` on the same ``--slots``, every tool
   call sleeping ``--sleep`` s, after a warm-up rollout (G=2). Peak RSS of the process, its rise during the rollout,
   the pool's K/V bytes, the calls and rounds made. The rollout's memory is set by the slots: a sample waiting on its
   tool holds no K/V.
2. **latency**: ``--latency-prompts`` prompts x ``--latency-group`` decoded by infgrpo (``MicroGroupSampler`` with
   ``model.agent``'s turns, one slot a sample: no queue) and by TRL 1.16's ``GRPOTrainer._generate`` (its
   ``_tool_call_loop``), in one process, in alternating order, ``--repeats`` times each; the tool sleeps
   ``--slow`` s on about one call in four (operands summing to a multiple of 4: the same calls whichever trainer
   makes them). Both use the same model object, prompt ids (TRL renders them; checked equal), ``max_new_tokens`` and
   ``--max-turns``, and decode greedily (``--latency-temperature 0``, the default): then both make the same exchanges
   (tests/training/test_agent_trl.py checks them equal), so both run the same calls, slow ones included. Wall
   seconds of each and their ratio, the calls and slow calls each made, and infgrpo's decode steps run while some
   sample waited on a tool.
3. **feeds** (``--parts feeds``, :mod:`benchmarks.agent_feeds`): dynamic sampling and adaptive groups with tools,
   each beside the plain rollout, on the calculator task's training prompts: informative groups per 1,000 tokens.
4. **resume** (``--parts resume``, :mod:`benchmarks.agent_resume`): prefill tokens and wall time per rollout with a
   resumed sample prefilling its prompt again (before issue 59) and on its prompt's kept K/V (after), side by side.

``--parts`` picks the parts (default: memory and latency).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from benchmarks import agent_feeds, agent_resume
from benchmarks.harness import Benchmark, spawn_all
from benchmarks.memory import PeakRSS, mib
from benchmarks.table import markdown_table, ratio

TOOL = "benchmarks.agent_tools:add"
DEALT = "benchmarks.agent_tools:Dealt"
PARTS = ("memory", "latency", "feeds", "resume")


def add_args(ap: argparse.ArgumentParser) -> None:
    """The model, both parts' sizes and the tool's latencies."""
    ap.add_argument("--model", default="tiny-tools", help="a tool-calling model (default: the shipped tiny one)")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=["memory", "latency"], help="what to measure")
    ap.add_argument("--groups", type=int, nargs="+", default=[8, 64], help="memory: the group sizes G")
    ap.add_argument("--prompts", type=int, default=2, help="memory: prompts a rollout")
    ap.add_argument("--slots", type=int, default=8, help="memory: num_slots")
    ap.add_argument("--sleep", type=float, default=0.05, help="memory: seconds every tool call sleeps")
    ap.add_argument(
        "--observations", choices=["row", "per-sample"], default="row",
        help="memory: 'per-sample': an environment deals each sample its own sum (benchmarks.agent_tools:Dealt)",
    )  # fmt: skip
    ap.add_argument("--latency-prompts", type=int, default=8)
    ap.add_argument("--latency-group", type=int, default=8)
    ap.add_argument("--slow", type=float, default=0.5, help="latency: seconds a slow call (one in four) sleeps")
    ap.add_argument("--repeats", type=int, default=3, help="latency: rollouts of each trainer")
    ap.add_argument("--latency-temperature", type=float, default=0.0, help="latency: 0 = greedy (the same exchanges)")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds each configuration may take")
    agent_feeds.add_args(ap)
    agent_resume.add_args(ap)


def run(args: argparse.Namespace) -> dict:
    """The parts asked for, each configuration in its own process: the memory ones, the latency one, the feeds."""
    common = {"model": args.model, "max_new_tokens": args.max_new_tokens, "max_turns": args.max_turns}
    common["threads"] = args.threads
    configs: dict[str, list[dict]] = {"memory": [], "latency": [], "feeds": [], "resume": []}
    if "memory" in args.parts:
        configs["memory"] = [
            {**common, "part": "memory", "group_size": g, "prompts": args.prompts, "slots": args.slots,
             "sleep": args.sleep, "observations": args.observations}
            for g in args.groups
        ]  # fmt: skip
    if "latency" in args.parts:
        configs["latency"] = [{
            **common, "part": "latency", "prompts": args.latency_prompts, "group_size": args.latency_group,
            "slow": args.slow, "repeats": args.repeats, "temperature": args.latency_temperature,
        }]  # fmt: skip
    if "feeds" in args.parts:
        configs["feeds"] = [agent_feeds.config(args, common)]
    if "resume" in args.parts:
        configs["resume"] = [agent_resume.config(args, common)]
    rows = spawn_all("agent", [c for part in configs.values() for c in part], timeout=args.timeout)
    out, n = {}, 0
    for part, cs in configs.items():
        if cs:
            out[part] = rows[n : n + len(cs)] if part == "memory" else rows[n]
        n += len(cs)
    return out


def setup(cfg: dict) -> tuple:
    """(model, tokenizer, agent, held-out items) of a configuration: float32 on CPU, the compact template."""
    from infgrpo.agent import AgentConfig
    from infgrpo.assets.calculator import make_split
    from infgrpo.policy.load import load_policy, load_tokenizer
    from infgrpo.training.agent_rollout import AgentRollout

    model = load_policy(cfg["model"], dtype="float32").eval()
    tokenizer = load_tokenizer(cfg["model"])
    rows = make_split(cfg["prompts"], seed=1234, split="eval")
    if cfg.get("observations") == "per-sample":  # each sample its own sum: the prompt is the observation
        agent = AgentRollout(
            AgentConfig(environment=DEALT, chat_template="compact", max_turns=cfg["max_turns"]), tokenizer
        )
        questions = [row["prompt"][-1]["content"] for row in make_split(64, seed=99, split="eval")]
        return model, tokenizer, agent, [{"prompt": [{"role": "user", "content": ""}], "meta": {"questions": questions}}
                                         for _ in rows]  # fmt: skip
    agent = AgentRollout(AgentConfig(tools=[TOOL], chat_template="compact", max_turns=cfg["max_turns"]), tokenizer)
    items = [{"prompt": row["prompt"], "meta": row} for row in rows]
    return model, tokenizer, agent, items


def sampler_for(model, tokenizer, slots: int, max_new_tokens: int, temperature: float = 1.0):  # noqa: ANN001, ANN201
    """infgrpo's sampler: ``slots`` slots, ``temperature``, no top-k / top-p, FIFO (no length predictor)."""
    from infgrpo.sampler import MicroGroupSampler, SamplerConfig

    cfg = SamplerConfig(
        num_slots=slots, max_new_tokens=max_new_tokens, temperature=temperature, length_predictor="none"
    )
    return MicroGroupSampler(model, tokenizer, cfg)


def run_one(cfg: dict) -> dict:
    """One configuration (in the child): its part's figures."""
    from benchmarks import agent_tools

    if cfg["part"] == "feeds":
        return agent_feeds.run(cfg)
    if cfg["part"] == "resume":
        return agent_resume.run(cfg, setup, sampler_for)
    model, tokenizer, agent, items = setup(cfg)
    if cfg["part"] == "memory":
        sampler = sampler_for(model, tokenizer, cfg["slots"], cfg["max_new_tokens"])
        per_sample = cfg.get("observations") == "per-sample"
        agent_tools.reset(base_s=cfg["sleep"])
        if per_sample:
            agent_tools.deal(1, items[0]["meta"]["questions"])
        agent.decode(sampler, items, 2, seed=1)  # warm-up: lazy initializations outside the measure
        agent_tools.reset(base_s=cfg["sleep"])
        if per_sample:
            agent_tools.deal(0, items[0]["meta"]["questions"])
        start = time.perf_counter()
        with PeakRSS() as rss:
            rollouts, _ = agent.decode(sampler, items, cfg["group_size"], seed=0)
        st = rollouts.stats
        return {
            **cfg, "wall_s": time.perf_counter() - start, "rss_peak": rss.peak, "rss_rise": rss.peak - rss.base,
            "kv_bytes_peak": st["kv_bytes_peak"], "completions": len(rollouts), "tool_calls": rollouts.tools.calls,
            "tool_rounds": rollouts.tools.rounds, "steps_while_waiting": rollouts.tools.steps_while_waiting,
            "distinct_prompts": len(rollouts.prompt_table()[0]),
        }  # fmt: skip
    return latency(cfg, model, tokenizer, agent, items)


def latency(cfg: dict, model, tokenizer, agent, items: list[dict]) -> dict:  # noqa: ANN001
    """Both trainers on the same prompts and tool, alternating, ``repeats`` times each."""
    from benchmarks import agent_tools

    trl = trl_trainer(model, tokenizer, cfg)
    g = cfg["group_size"]
    sampler = sampler_for(model, tokenizer, len(items) * g, cfg["max_new_tokens"], cfg["temperature"])
    trl_prompts = [it["prompt"] for it in items for _ in range(g)]
    ours_ids = agent.prompt_ids(items)
    trl_ids = trl._tokenize_prompts(trl_prompts)[0]
    same_prompts = all(list(trl_ids[i * g]) == ours_ids[i] for i in range(len(items)))
    runs: dict[str, list[dict]] = {"infgrpo": [], "trl": []}
    for r in range(cfg["repeats"]):
        for name in ("infgrpo", "trl") if r % 2 == 0 else ("trl", "infgrpo"):
            agent_tools.reset(slow_s=cfg["slow"])
            start = time.perf_counter()
            if name == "infgrpo":
                rollouts, _ = agent.decode(sampler, items, g, seed=r)
                extra = {"steps_while_waiting": rollouts.tools.steps_while_waiting}
                extra["decode_steps"] = rollouts.stats["decode_steps"]
            else:  # the per-rollout tool dicts _generate_and_score_completions builds before it generates
                trl._sync_tool_dicts = [{"add": agent_tools.add} for _ in trl_prompts]
                trl._async_tool_dicts = [{} for _ in trl_prompts]
                with torch.no_grad():
                    trl._generate(trl_prompts)
                extra = {}
            wall = time.perf_counter() - start
            calls = {"calls": agent_tools.CALLS["n"], "slow": agent_tools.CALLS["slow"]}
            runs[name].append({"wall_s": wall, **calls, **extra})
    ours = statistics.median(x["wall_s"] for x in runs["infgrpo"])
    theirs = statistics.median(x["wall_s"] for x in runs["trl"])
    return {**cfg, "same_prompt_ids": same_prompts, "runs": runs, "infgrpo_s": ours, "trl_s": theirs}


def trl_trainer(model, tokenizer, cfg: dict):  # noqa: ANN001, ANN201
    """TRL 1.16's ``GRPOTrainer`` with ``tools=[add]`` on ``model`` (its generation only is used)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from benchmarks.agent_tools import add
    from infgrpo.agent.chat import TEMPLATES

    tokenizer.chat_template = (TEMPLATES / "compact.jinja").read_text()  # TRL renders with the tokenizer's own
    g = cfg["group_size"]
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=g, num_generations=g,
        max_completion_length=cfg["max_new_tokens"], max_tool_calling_iterations=cfg["max_turns"],
        temperature=cfg["temperature"] or 1.0, top_k=0, top_p=1.0, report_to=[], use_cpu=True, bf16=False,
        generation_kwargs={} if cfg["temperature"] else {"do_sample": False},
    )  # fmt: skip
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "1+1?"}]}] * g)
    return GRPOTrainer(
        model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
        train_dataset=data, processing_class=tokenizer, tools=[add],
    )  # fmt: skip


def tables(result: dict) -> str:
    """The tables of the parts measured: the memory rows, the latency runs and their ratio, the feeds."""
    out = "\n\n".join(part for part in (memory_table(result), latency_table(result)) if part)
    for part, table in (("feeds", agent_feeds.table), ("resume", agent_resume.table)):
        if part in result:
            out += ("\n\n" if out else "") + table(result[part])
    return out


def memory_table(result: dict) -> str:
    """The memory rows and the peak RSS ratio ("" without the part)."""
    if "memory" not in result:
        return ""
    mem_cols = [
        ("G", lambda r: r["group_size"]), ("prompts", lambda r: r["prompts"]), ("slots", lambda r: r["slots"]),
        ("completions", lambda r: r.get("completions")), ("tool calls", lambda r: r.get("tool_calls")),
        ("prompts prefilled", lambda r: r.get("distinct_prompts")),
        ("peak RSS MiB", lambda r: mib(r["rss_peak"]) if "rss_peak" in r else None),
        ("rise MiB", lambda r: mib(r["rss_rise"]) if "rss_rise" in r else None),
        ("pool K/V MiB", lambda r: mib(r["kv_bytes_peak"]) if "kv_bytes_peak" in r else None),
        ("rollout s", lambda r: f"{r['wall_s']:.1f}" if "wall_s" in r else None),
    ]  # fmt: skip
    out = markdown_table(mem_cols, result["memory"])
    mem = [r for r in result["memory"] if "rss_peak" in r]
    if len(mem) >= 2:
        first, last = mem[0], mem[-1]
        out += (
            f"\n\npeak RSS at G={last['group_size']} / at G={first['group_size']}: "
            f"{ratio(last['rss_peak'], first['rss_peak'])}"
        )
    return out


def latency_table(result: dict) -> str:
    """The latency runs and their ratio ("" without the part)."""
    if "latency" not in result:
        return ""
    lat = result["latency"]
    if "runs" not in lat:
        return f"latency: skipped ({lat.get('skipped')})"
    rows = [{"trainer": name, "run": i, **x} for name, xs in lat["runs"].items() for i, x in enumerate(xs)]
    lat_cols = [
        ("trainer", lambda r: r["trainer"]), ("run", lambda r: r["run"]), ("wall s", lambda r: f"{r['wall_s']:.2f}"),
        ("tool calls", lambda r: r["calls"]), ("slow calls", lambda r: r["slow"]),
        ("decode steps", lambda r: r.get("decode_steps", "")),
        ("steps while a tool ran", lambda r: r.get("steps_while_waiting", "")),
    ]  # fmt: skip
    out = markdown_table(lat_cols, rows)
    out += (
        f"\n\nmedian wall s: infgrpo {lat['infgrpo_s']:.2f}, TRL 1.16 {lat['trl_s']:.2f}: "
        f"{ratio(lat['infgrpo_s'], lat['trl_s'])} (same prompt ids: {lat['same_prompt_ids']})"
    )
    return out


BENCH = Benchmark("agent", __doc__, add_args, run, tables, run_one=run_one, threads=1)


def main(argv: list[str] | None = None) -> dict:
    """``python -m benchmarks agent``."""
    return BENCH.main(argv)
