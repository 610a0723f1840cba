"""Fixed-seed fingerprint of infgrpo: rollout completion ids (as bench rollout --model tiny) and params after 5 tiny steps.

    python fingerprint.py rollout OUT.json    # every default config of `bench rollout --model tiny`, threads 1
    python fingerprint.py train OUT.json      # fit configs/tiny.yaml for 5 steps, hash of every parameter
"""
import hashlib, json, random, sys
import torch

def rollout(out):
    torch.set_num_threads(1)
    from infgrpo import MicroGroupSampler, SamplerConfig
    from infgrpo.models import load_policy, load_tokenizer
    try:
        from infgrpo.data.datamodule import encode_prompt, load_rows
    except ImportError:
        raise
    try:
        from infgrpo.runtime.threads import set_threads
    except ImportError:
        from infgrpo.threads import set_threads
    set_threads(1)
    tok = load_tokenizer("tiny")
    model = load_policy("tiny").eval()
    res = {}
    for n_prompts in (1, 8):
        rng = random.Random(0)
        by_task = {t: [r for r in load_rows("tiny", "eval") if r["task"] == t] for t in ("count", "rev", "dup")}
        order = ("count", "rev", "dup")
        rows = [rng.choice(by_task[order[i % 3]]) for i in range(n_prompts)]
        prompts = [encode_prompt(tok, r["prompt"], None, True) for r in rows]
        for g in (8, 32, 128, 512):
            for dec in ("hf_full", "hf_micro", "engine"):
                sc = SamplerConfig(num_slots=16, max_new_tokens=96, decoder=dec, stop_token_ids=[], temperature=1.0)
                try:
                    s = MicroGroupSampler(model, tok.eos_token_id, sc, pad_id=tok.pad_token_id)
                except TypeError:  # before the pad_id parameter
                    s = MicroGroupSampler(model, tok.eos_token_id, sc)
                    s.pad_id = tok.pad_token_id
                s.sample(prompts[:1], 2, seed=99)
                o = s.sample(prompts, g, seed=0)
                blob = json.dumps([o.completion_ids, [torch.as_tensor(lp).tolist() for lp in o.logprobs]]).encode()
                key = f"{n_prompts}x{g}/{dec}"
                res[key] = {"ids": hashlib.sha256(json.dumps(o.completion_ids).encode()).hexdigest()[:16],
                            "ids_logprobs": hashlib.sha256(blob).hexdigest()[:16],
                            "decode_steps": o.stats["decode_steps"]}
                print(key, res[key], flush=True)
    allh = hashlib.sha256(json.dumps({k: v["ids"] for k, v in sorted(res.items())}).encode()).hexdigest()[:16]
    res["ALL_ids"] = allh
    print("ALL completion ids", allh)
    json.dump(res, open(out, "w"), indent=1)

def train(out):
    from infgrpo.fit import main
    cli = main(["--config", "configs/tiny.yaml", "--trainer.max_steps", "5", "--trainer.default_root_dir", "/tmp/fp_run",
                "--trainer.enable_progress_bar", "false"])
    h = hashlib.sha256()
    for name, p in sorted(cli.model.policy.state_dict().items()):
        h.update(name.encode()); h.update(p.detach().cpu().contiguous().numpy().tobytes())
    d = {"params_sha256": h.hexdigest()[:16]}
    print(d); json.dump(d, open(out, "w"))

if __name__ == "__main__":
    {"rollout": rollout, "train": train}[sys.argv[1]](sys.argv[2])
