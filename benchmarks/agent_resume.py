"""``bench agent``'s resume part: what a resumed multi-turn sample prefills, before and after issue 59.

    python -m benchmarks agent --parts resume --json benchmarks/agent_resume_tiny_tools.json

The shipped tool-calling model on the calculator task's held-out prompts (``--resume-prompts`` x
``--resume-group``, ``--resume-slots`` slots, ``--resume-temperature`` (1), ``max_new_tokens`` 160, ``max_turns``
2), with ``benchmarks.agent_tools:add`` (no sleep). One process, the two ways side by side, alternating,
``--repeats`` times each, the same seeds:

- ``before``: a resumed sample prefills its prompt + completion + tool results (``ModelRunner.resume_on_prompt``
  off: no prompt K/V kept for resumes, as before issue 59);
- ``after``: the prompt's K/V are kept while any of its samples is in flight (at most ``num_slots`` prompts), so a
  resumed sample prefills its completion + tool results only.

Per rollout: prefill tokens and calls, the K/V held at the peak (the pool plus the prompts' and resumed samples'
K/V), wall seconds, tool rounds, and whether both ways decoded the same completions.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.table import markdown_table, ratio

WAYS = ("before", "after")


def add_args(ap: argparse.ArgumentParser) -> None:
    """The resume part's size."""
    ap.add_argument("--resume-prompts", type=int, default=8, help="resume: prompts a rollout")
    ap.add_argument("--resume-group", type=int, default=4, help="resume: G")
    ap.add_argument("--resume-slots", type=int, default=16, help="resume: num_slots (the same memory bound for both)")
    ap.add_argument("--resume-temperature", type=float, default=1.0, help="resume: sampling temperature (0: greedy)")


def config(args: argparse.Namespace, common: dict) -> dict:
    """The resume part's configuration (one child process)."""
    return {
        **common, "part": "resume", "prompts": args.resume_prompts, "group_size": args.resume_group,
        "slots": args.resume_slots, "repeats": args.repeats, "temperature": args.resume_temperature,
    }  # fmt: skip


def run(cfg: dict, setup, sampler_for) -> dict:  # noqa: ANN001 - the agent benchmark's helpers
    """Both ways, alternating, ``repeats`` times each; one row a rollout."""
    from benchmarks import agent_tools
    from infgrpo.sampler.engine.model_runner import ModelRunner

    model, tokenizer, agent, items = setup(cfg)
    sampler = sampler_for(model, tokenizer, cfg["slots"], cfg["max_new_tokens"], cfg["temperature"])
    agent_tools.reset(base_s=0.0)
    agent.decode(sampler, items, 2, seed=1)  # warm-up: lazy initializations outside the measure
    rows, outputs = [], {}
    for r in range(cfg["repeats"]):
        for way in WAYS if r % 2 == 0 else WAYS[::-1]:
            ModelRunner.resume_on_prompt = way == "after"
            agent_tools.reset(base_s=0.0)
            start = time.perf_counter()
            rollouts, _ = agent.decode(sampler, items, cfg["group_size"], seed=r)
            wall = time.perf_counter() - start
            st = rollouts.stats
            outputs[way, r] = rollouts.completion_ids
            rows.append({
                "way": way, "run": r, "wall_s": wall, "prefill_tokens": st["prefill_tokens"],
                "prefill_calls": st["prefill_calls"], "kv_bytes_peak": st["kv_bytes_peak"],
                "tool_rounds": rollouts.tools.rounds, "completions": len(rollouts),
            })  # fmt: skip
    ModelRunner.resume_on_prompt = True
    agent.close()
    same = all(outputs["before", r] == outputs["after", r] for r in range(cfg["repeats"]))
    summary = {
        way: {k: statistics.median(x[k] for x in rows if x["way"] == way)
              for k in ("wall_s", "prefill_tokens", "prefill_calls", "kv_bytes_peak", "tool_rounds")}
        for way in WAYS
    }  # fmt: skip
    return {**cfg, "rows": rows, "summary": summary, "same_completions": same}


def table(result: dict) -> str:
    """The rollouts, then after / before of the medians."""
    if "rows" not in result:
        return f"resume: skipped ({result.get('skipped')})"
    cols = [
        ("way", lambda r: r["way"]), ("run", lambda r: r["run"]), ("tool rounds", lambda r: r["tool_rounds"]),
        ("prefill tokens", lambda r: r["prefill_tokens"]), ("prefill calls", lambda r: r["prefill_calls"]),
        ("K/V peak KiB", lambda r: f"{r['kv_bytes_peak'] / 1024:.0f}"), ("wall s", lambda r: f"{r['wall_s']:.2f}"),
    ]  # fmt: skip
    b, a = result["summary"]["before"], result["summary"]["after"]
    return markdown_table(cols, result["rows"]) + (
        f"\n\nmedians, after / before: prefill tokens {a['prefill_tokens']:.0f} / {b['prefill_tokens']:.0f} = "
        f"{ratio(a['prefill_tokens'], b['prefill_tokens'])}, wall s {a['wall_s']:.2f} / {b['wall_s']:.2f} = "
        f"{ratio(a['wall_s'], b['wall_s'])}, K/V peak {ratio(a['kv_bytes_peak'], b['kv_bytes_peak'])} "
        f"(same completions: {result['same_completions']})"
    )
