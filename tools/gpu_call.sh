#!/usr/bin/env bash
# The lent GPU's one call (issue #29 item 8): the `run` tool with carry [".whl"] and the command
#   bash tools/gpu_call.sh
# installs the carried wheels (tools/gpu_wheels.sh fetches them here, once), prints the versions, then runs
# `bench paper --parts checks b a`: the CUDA-only tests, one GRPO step of configs/qwen3.yaml's recipe, the
# decoders, each in its own time box, each part's JSON into $OUT as it ends, with graph_captures and any
# eager fallback printed. On a CPU (no .whl folder needed): bash tools/gpu_call.sh --small --threads 1
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/infgrpo-paper}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_call: installing .whl/ failed" >&2; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
python3 - <<'PY' || exit 1
import importlib.util, torch, transformers
missing = [m for m in ("pytest", "bitsandbytes", "peft", "lightning", "datasets") if importlib.util.find_spec(m) is None]
print(f"torch {torch.__version__} cuda {torch.cuda.is_available()} transformers {transformers.__version__} missing {missing}")
PY
# the suite stops starting parts at --budget; timeout is the last guard (the run tool's limit is 600 s)
timeout "${GPU_CALL_TIMEOUT_S:-560}" python3 -m benchmarks paper --parts checks b a --budget "${GPU_CALL_BUDGET_S:-500}" \
  --json-dir "$OUT" "$@"
