"""Peak resident memory of one evaluation prefill at configs/qwen3.yaml's shape (issue #29, item 7).

    HF_HUB_OFFLINE=1 python tools/prefill_rss.py benchmarks/tools/prefill_rss.json

A random model with Qwen3-1.7B's attention (28 layers, 16 query and 8 K/V heads of 128, bfloat16: the
recipe's 114,688 bytes of K/V a position) but a small hidden size and vocabulary, so the K/V and not
the weights dominates; 64 prompts (the recipe's ``data.eval_batch_size``) of 128-384 tokens (its
``max_prompt_length``), prefilled in one call of :func:`infgrpo.sampler.prefill.prefill` as the first
round of an evaluation runs them. Each measurement is a fresh process: the rise of ``ru_maxrss`` over
the call, beside the bytes of one copy of the prompts' K/V (unpadded) and of the batch's padded cache.
Run it against another checkout with ``PYTHONPATH=<checkout>`` (before/after).
"""

import json
import random
import resource
import subprocess
import sys
from pathlib import Path

PROMPTS, SHORTEST, LONGEST = 64, 128, 384
SHAPE = dict(num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128)


def child() -> dict:
    """The measured prefill, in this process."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    import infgrpo
    from infgrpo.sampler.engine.prefill import prefill
    from infgrpo.sampler.model_support import kv_bytes_per_token

    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = Qwen3Config(vocab_size=1000, hidden_size=128, intermediate_size=256, max_position_embeddings=512, **SHAPE)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16).eval()
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 1000) for _ in range(rng.randint(SHORTEST, LONGEST))] for _ in range(PROMPTS)]
    uniforms = torch.zeros(PROMPTS, 1)
    per_token = kv_bytes_per_token(model)
    with torch.no_grad():  # the forward's own transients at this size, before the measured call
        model(input_ids=torch.tensor([prompts[0][:SHORTEST]]))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    kv, _, _ = prefill(model, prompts, uniforms, torch.bfloat16, 0.0, 0, 1.0, 0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "infgrpo": str(Path(infgrpo.__file__).parent),
        "kv_bytes_per_token": per_token,
        "prompt_kv_bytes": sum(t.nbytes for t in kv),
        "padded_cache_bytes": per_token * PROMPTS * max(map(len, prompts)),
        "rss_peak_rise_bytes": peak - before,
    }


def main(out: str) -> None:
    """One measurement in a fresh process (the ``PYTHONPATH`` checkout's infgrpo); the row to ``out`` (JSON)."""
    run = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(run.stderr[-2000:])
    row = json.loads(lines[0].removeprefix("RESULT "))
    row["copies_at_peak"] = row["rss_peak_rise_bytes"] / row["prompt_kv_bytes"]
    print(json.dumps(row, indent=1))
    rows = json.loads(Path(out).read_text())["rows"] if Path(out).exists() else []
    command = f"HF_HUB_OFFLINE=1 python tools/prefill_rss.py {out}"
    Path(out).write_text(json.dumps({"command": command, "rows": [*rows, row]}, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        print("RESULT " + json.dumps(child()))
    else:
        main(sys.argv[1])
