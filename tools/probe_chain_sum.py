"""What a model can and cannot answer on ``bench learn``'s chain_sum job, by kind of answer: greedy and sampled.

    python tools/probe_chain_sum.py                          # the untrained SmolLM2, first 60 held-out prompts
    python tools/probe_chain_sum.py --adapter runs/smollm2-cpu/adapter --prompts 200

The held-out prompts are the job's (:func:`benchmarks.learn_job.job_data`: 200 never trained on); each
answer is put in one kind: ``add2`` (a sum below 100), ``add3`` (a sum of 100 or more), ``sub+`` (a
difference >= 0) and ``neg`` (a negative difference). Per kind: how many greedy answers are right, the mean
number of right samples out of ``--group-size`` at ``--temperature`` (what GRPO's groups see), and how many
groups have at least one right sample (a group with none gives no gradient).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

from infgrpo.policy import load_policy, load_tokenizer
from infgrpo.rewards import compute_rewards
from infgrpo.sampler import MicroGroupSampler, SamplerConfig

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout: benchmarks/ is a folder there, not installed
from benchmarks.learn_job import ANSWER_ONLY, CHAIN_SUM, answer_kind, job_data


def main() -> None:
    """Prints the table of the module docstring for the untrained model or ``--adapter``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", default=None, help="a peft adapter folder (default: the untrained model)")
    ap.add_argument("--prompts", type=int, default=60, help="the first N held-out prompts")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    job = dict(model="smollm2", gguf_file=None, task="chain_sum", task_config=CHAIN_SUM, prompt_template=ANSWER_ONLY)
    items = job_data({**job, "prompts": 4, "eval_size": 200, "seed": 0}).eval_items[: args.prompts]
    tok, model = load_tokenizer("smollm2"), load_policy("smollm2")
    if args.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, args.adapter)
    model.eval()
    ids, metas, g = [it["prompt_ids"] for it in items], [it["meta"] for it in items], args.group_size
    greedy = MicroGroupSampler(model, tok, SamplerConfig(max_new_tokens=48, temperature=0.0)).generate_one(ids)
    greedy_texts = tok.batch_decode(greedy.completion_ids, skip_special_tokens=True)
    greedy_right = compute_rewards({"reasoning_gym": 1.0}, greedy_texts, metas)[0].tolist()
    sampler = MicroGroupSampler(
        model, tok, SamplerConfig(max_new_tokens=48, temperature=args.temperature, num_slots=32)
    )
    stats: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0, 0, 0])  # n, greedy, samples, groups
    for start in range(0, len(ids), 4):
        out = sampler.sample(ids[start : start + 4], g, seed=start)
        texts = tok.batch_decode(out.completion_ids, skip_special_tokens=True)
        right = compute_rewards({"reasoning_gym": 1.0}, texts, [metas[start + k // g] for k in range(len(texts))])[0]
        right = right.tolist()
        for i in range(len(texts) // g):
            s, group = stats[answer_kind(metas[start + i])], right[i * g : (i + 1) * g]
            s[0] += 1
            s[1] += greedy_right[start + i] >= 1
            s[2] += sum(x >= 1 for x in group) / g
            s[3] += any(x >= 1 for x in group)
    print(f"| kind | prompts | greedy right | right samples of {g} (mean) | groups with a right sample |")
    print("|---|---|---|---|---|")
    for name in sorted(stats) + ["all"]:
        s = [sum(v[k] for v in stats.values()) for k in range(4)] if name == "all" else stats[name]
        print(f"| {name} | {s[0]} | {s[1]} | {g * s[2] / s[0]:.2f} | {s[3]} |")
    print("commonest greedy completions:", collections.Counter(greedy_texts).most_common(3))


if __name__ == "__main__":
    main()
