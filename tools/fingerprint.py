"""Fixed-seed fingerprints of infgrpo: rollout completion ids and log-probs, and parameters after 5 steps.

    python tools/fingerprint.py rollout OUT.json   # every default configuration of bench rollout --model tiny
    python tools/fingerprint.py train OUT.json     # fit configs/tiny.yaml for 5 steps: sha256 of every parameter
    python tools/fingerprint.py dynamic OUT.json   # dynamic sampling: both schemes, 5 fit steps, bench dynamic's rows
    python tools/fingerprint.py adaptive OUT.json  # adaptive groups: 5 fit steps under each rule, alone and dynamic

Two commits whose fingerprints agree sample the same completions and train to the same parameters
(issues #17 and #28 compared the commits before and after their restructurings this way; threads fixed at 1).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout: benchmarks/ is a folder there, not installed

TASKS = ("count", "rev", "dup")


def digest(value: object) -> str:
    """The first 16 hex digits of the sha256 of ``value`` as JSON."""
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


def rollout(out: str) -> None:
    """Hashes of every (prompts x G x decoder) configuration of ``bench rollout --model tiny``, to ``out``."""
    from infgrpo import MicroGroupSampler, SamplerConfig
    from infgrpo.data.datamodule import encode_prompt, load_rows
    from infgrpo.policy.load import load_policy, load_tokenizer
    from infgrpo.runtime.threads import set_threads

    set_threads(1)
    tok, model = load_tokenizer("tiny"), load_policy("tiny").eval()
    by_task = {t: [r for r in load_rows("tiny", "eval") if r["task"] == t] for t in TASKS}
    res: dict = {}
    for n_prompts in (1, 8):
        rng = random.Random(0)
        rows = [rng.choice(by_task[TASKS[i % 3]]) for i in range(n_prompts)]
        prompts = [encode_prompt(tok, r["prompt"], None, True) for r in rows]
        for g in (8, 32, 128, 512):
            for decoder in ("hf_full", "hf_micro", "engine"):
                cfg = SamplerConfig(num_slots=16, max_new_tokens=96, decoder=decoder, stop_token_ids=[])
                sampler = MicroGroupSampler(model, tok.eos_token_id, cfg, pad_id=tok.pad_token_id)
                sampler.sample(prompts[:1], 2, seed=99)  # warm-up, as the benchmark
                o = sampler.sample(prompts, g, seed=0)
                logprobs = [torch.as_tensor(lp).tolist() for lp in o.logprobs]
                key = f"{n_prompts}x{g}/{decoder}"
                res[key] = {
                    "ids": digest(o.completion_ids),
                    "ids_logprobs": digest([o.completion_ids, logprobs]),
                    "decode_steps": o.stats["decode_steps"],
                }
                print(key, res[key], flush=True)
    res["ALL_ids"] = digest({k: v["ids"] for k, v in sorted(res.items())})
    print("ALL completion ids", res["ALL_ids"])
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


def fit_params(*overrides: str) -> str:
    """The sha256 of every parameter after 5 steps of ``configs/tiny.yaml`` with ``overrides``."""
    from infgrpo.fit import main

    with tempfile.TemporaryDirectory() as root:
        cli = main(
            ["--config", "configs/tiny.yaml", "--trainer.max_steps", "5", "--trainer.default_root_dir", root,
             "--trainer.enable_progress_bar", "false", "--model.threads", "1", *overrides]
        )  # fmt: skip
    h = hashlib.sha256()
    for name, p in sorted(cli.model.policy.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def train(out: str) -> None:
    """The sha256 of every parameter after 5 steps of ``configs/tiny.yaml``, to ``out``."""
    result = {"params_sha256": fit_params()}
    print(result)
    with open(out, "w") as f:
        json.dump(result, f)


def dynamic(out: str) -> None:
    """Dynamic sampling on the tiny default, to ``out``: the kept groups' completion ids and log-probs, the draw
    positions and the ``dynamic/*`` counters of both schemes (continuous and verl's rounds) under two refill
    policies; the parameters after 5 fit steps with ``dynamic_sampling.enabled``; ``bench dynamic``'s rows."""
    from infgrpo import MicroGroupSampler, SamplerConfig
    from infgrpo.data.datamodule import encode_prompt, load_rows
    from infgrpo.policy.load import load_policy, load_tokenizer
    from infgrpo.rewards.synthetic import synthetic_reward
    from infgrpo.runtime.threads import set_threads
    from infgrpo.sampler.engine.plan import DynamicSpec

    set_threads(1)
    tok, model = load_tokenizer("tiny"), load_policy("tiny").eval()
    rows = load_rows("tiny", "train")[:64]
    prompts = [encode_prompt(tok, r["prompt"], None, True) for r in rows]

    def keep(position: int, group: list) -> bool:
        texts = tok.batch_decode([s.token_ids for s in group], skip_special_tokens=True)
        row, n = rows[position], len(group)
        return len(set(synthetic_reward(texts, [row["prompt"]] * n, [row["answer"]] * n))) > 1

    res: dict = {}
    for scheme in ("continuous", "rounds"):
        for refill in ("fifo", "lpt"):
            cfg = SamplerConfig(num_slots=8, max_new_tokens=48, refill=refill)
            sampler = MicroGroupSampler(model, tok.eos_token_id, cfg, pad_id=tok.pad_token_id)
            for step in range(2):
                spec = DynamicSpec(4, 16, keep, scheme=scheme, round_size=4)
                o = sampler.sample_dynamic(iter(prompts[step * 16 :]), 4, step, spec, max(map(len, prompts)))
                stats = {k: v for k, v in o.stats.items() if k.startswith("dynamic/")}
                key = f"{scheme}/{refill}/{step}"
                res[key] = {
                    "ids_logprobs": digest([o.completion_ids, [torch.as_tensor(lp).tolist() for lp in o.logprobs]]),
                    "drawn": o.drawn, "decode_steps": o.stats["decode_steps"], "stats": stats,
                }  # fmt: skip
                print(key, res[key], flush=True)
    res["fit_params_sha256"] = fit_params("--model.dynamic_sampling.enabled", "true")
    print("fit", res["fit_params_sha256"], flush=True)
    from benchmarks.dynamic import main as bench_dynamic

    argv = ["--model", "tiny", "--steps", "2", "--prompts", "2", "--group-size", "4", "--num-slots", "8"]
    bench = bench_dynamic(argv)
    res["bench_rows"] = digest([{k: v for k, v in r.items() if k != "wall_s"} for r in bench["rows"]])
    print("bench dynamic rows", res["bench_rows"])
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


def adaptive(out: str) -> None:
    """Adaptive groups on the tiny default, to ``out``: the parameters after 5 fit steps under each rule (and the
    value rule with dynamic sampling), small caps so that groups are extended and the caps bind."""
    on = ["--model.adaptive_groups.enabled", "true", "--model.adaptive_groups.max_samples_per_prompt", "24",
          "--model.adaptive_groups.max_samples_per_step", "96"]  # fmt: skip
    runs = {
        "value": on,
        "uniform": [*on, "--model.adaptive_groups.rule", "uniform"],
        "value+dynamic": [*on, "--model.dynamic_sampling.enabled", "true"],
    }
    res = {}
    for name, overrides in runs.items():
        res[name] = fit_params(*overrides)
        print(name, res[name], flush=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    {"rollout": rollout, "train": train, "dynamic": dynamic, "adaptive": adaptive}[sys.argv[1]](sys.argv[2])
