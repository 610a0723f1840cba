"""Fixed-seed fingerprints of infgrpo: rollout completion ids and log-probs, and parameters after 5 steps.

    python tools/fingerprint.py rollout OUT.json   # every default configuration of bench rollout --model tiny
    python tools/fingerprint.py train OUT.json     # fit configs/tiny.yaml for 5 steps: sha256 of every parameter

Two commits whose fingerprints agree sample the same completions and train to the same parameters
(issues #17 and #28 compared the commits before and after their restructurings this way; threads fixed at 1).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import tempfile

import torch

TASKS = ("count", "rev", "dup")


def digest(value: object) -> str:
    """The first 16 hex digits of the sha256 of ``value`` as JSON."""
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


def rollout(out: str) -> None:
    """Hashes of every (prompts x G x decoder) configuration of ``bench rollout --model tiny``, to ``out``."""
    from infgrpo import MicroGroupSampler, SamplerConfig
    from infgrpo.data.datamodule import encode_prompt, load_rows
    from infgrpo.models import load_policy, load_tokenizer
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


def train(out: str) -> None:
    """The sha256 of every parameter after 5 steps of ``configs/tiny.yaml``, to ``out``."""
    from infgrpo.fit import main

    with tempfile.TemporaryDirectory() as root:
        cli = main(
            ["--config", "configs/tiny.yaml", "--trainer.max_steps", "5", "--trainer.default_root_dir", root,
             "--trainer.enable_progress_bar", "false", "--model.threads", "1"]
        )  # fmt: skip
    h = hashlib.sha256()
    for name, p in sorted(cli.model.policy.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    result = {"params_sha256": h.hexdigest()[:16]}
    print(result)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    {"rollout": rollout, "train": train}[sys.argv[1]](sys.argv[2])
