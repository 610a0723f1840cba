"""``bench vlm --parts memory``: peak RSS of a rollout on image prompts at a large group against a small one.

    cfg = {"model": "tiny-vl", "data": ..., "prompts": 4, "group_size": 64, "slots": 16, "max_new_tokens": 32, ...}
    run(cfg)        # in a fresh process (bench vlm spawns one per G): peak RSS around one rollout, and its counts

The sampler (``MicroGroupSampler``, float32, temperature 1, ``--slots`` slots) decodes the first ``--memory-prompts``
shapes prompts of the job's data x G, after a warm-up rollout at G=2 (lazy initializations outside the measure).
Measured around the rollout alone, the model loaded: peak RSS and its rise, the pool's K/V bytes, the images through
the vision tower and the prompt tokens prefilled (each prompt once, whatever G), decoded tokens and decode steps.
The slot pool bounds what a rollout holds: G decides how many sequences pass through the slots, not how many are
held at once; what grows with G is only the completions kept (ids and log-probs, a few bytes a token).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from benchmarks.learn_job import ordered_batches
from benchmarks.memory import PeakRSS, mib
from benchmarks.table import markdown_table, ratio
from benchmarks.vlm_job import Counts, job_data


def run(cfg: dict) -> dict[str, Any]:
    """One rollout of ``prompts`` image prompts x ``group_size`` on ``slots`` slots, measured in this process."""
    from infgrpo import MicroGroupSampler, SamplerConfig
    from infgrpo.policy.load import load_policy, load_tokenizer
    from infgrpo.vision.features import forget_features
    from infgrpo.vision.inputs import batch_visions

    model = load_policy(cfg["model"], dtype="float32").eval()
    tokenizer = load_tokenizer(cfg["model"])
    data = job_data({**cfg, "steps": 1})
    batch = ordered_batches(data, 1)[0]  # the collate renders each prompt's image once: its VisionInputs
    prompts, vision = [item["prompt_ids"] for item in batch], batch_visions(batch)
    config = SamplerConfig(num_slots=cfg["slots"], max_new_tokens=cfg["max_new_tokens"], temperature=1.0)
    sampler = MicroGroupSampler(model, tokenizer, config)
    sampler.sample(prompts, 2, seed=1, vision=vision)  # warm-up
    forget_features(vision)  # the measured rollout is a step's first: it encodes the images (the warm-up kept them)
    counts = Counts(model)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with counts.phase("rollout"), PeakRSS() as rss:
        out = sampler.sample(prompts, cfg["group_size"], seed=0, vision=vision)
    wall = time.perf_counter() - start
    counts.remove()
    st = out.stats
    result = {
        **cfg, "rss_peak_bytes": rss.peak, "rss_rise_bytes": rss.peak - rss.base, "kv_bytes_peak": st["kv_bytes_peak"],
        "completions": len(out.completion_ids), "images": counts.result().get("rollout", {}).get("images", 0),
        "prefill_tokens": st["prefill_tokens"], "prompt_tokens": sum(map(len, prompts)),
        "generated_tokens": st["generated_tokens"], "decode_steps": st["decode_steps"], "wall_s": wall,
    }  # fmt: skip
    if torch.cuda.is_available():
        result["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
    return result


def table(rows: list[dict]) -> str:
    """One row per G, and the peak RSS of the largest G against the smallest's."""
    cuda = any("cuda_max_allocated_bytes" in r for r in rows)
    columns: list[Any] = [
        ("G", lambda r: r["group_size"]), ("prompts", lambda r: r["prompts"]), ("slots", lambda r: r["slots"]),
        ("completions", lambda r: r["completions"]), ("images through the tower", lambda r: r["images"]),
        ("prompt tokens prefilled / prompt tokens", lambda r: f"{r['prefill_tokens']} / {r['prompt_tokens']}"),
        ("decoded tokens", lambda r: r["generated_tokens"]), ("decode steps", lambda r: r["decode_steps"]),
        ("peak RSS MiB", lambda r: mib(r["rss_peak_bytes"])), ("RSS rise MiB", lambda r: mib(r["rss_rise_bytes"])),
        ("pool K/V MiB", lambda r: mib(r["kv_bytes_peak"])), ("rollout s", lambda r: f"{r['wall_s']:.1f}"),
    ]  # fmt: skip
    if cuda:
        columns.append(("CUDA max allocated MiB", lambda r: mib(r.get("cuda_max_allocated_bytes", 0))))
    out = markdown_table(columns, rows, keys=3)
    done = sorted((r for r in rows if "skipped" not in r), key=lambda r: r["group_size"])
    if len(done) >= 2:
        small, large = done[0], done[-1]
        out += (
            f"\n\npeak RSS at G={large['group_size']} / at G={small['group_size']}: "
            f"{ratio(large['rss_peak_bytes'], small['rss_peak_bytes'])} (target: within 5%)"
        )
        if cuda:
            cuda_ratio = ratio(large["cuda_max_allocated_bytes"], small["cuda_max_allocated_bytes"])
            out += f"; CUDA max allocated: {cuda_ratio}"
    return out
