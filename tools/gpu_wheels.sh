#!/usr/bin/env bash
# Fetches, once, the wheels tools/gpu_call.sh installs on the lent GPU machine (it has torch 2.11 + CUDA,
# lightning, peft, accelerate; transformers too old; no bitsandbytes, datasets, jsonargparse or pytest; no
# package index). .whl/ stays out of git (.git/info/exclude); with the checkout it must fit the 64 MiB carry.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any -d .whl \
  transformers==5.24.0 bitsandbytes==0.50.2 peft==0.21.2 datasets==5.2.0 "dill<0.4.2" "multiprocess<0.70.20" \
  pytest pluggy iniconfig jsonargparse docstring-parser typeshed-client
# bitsandbytes ships a library for every CUDA and ROCm release (42 MB zipped); the GPU machine's torch is built
# for CUDA 13, so only the cuda13x libraries stay (the wheel shrinks to a few MB and the carry fits 64 MiB)
python3 - <<'PY'
import glob, os, re, zipfile
drop = re.compile(r"bitsandbytes/libbitsandbytes_(cuda1[0-2]\d|rocm)\w*\.so")
for path in glob.glob(".whl/bitsandbytes-*.whl"):
    slim = path + ".slim"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if drop.fullmatch(info.filename):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(ln for ln in lines if not drop.fullmatch(ln.split(",")[0])).encode()
            dst.writestr(info, data)
    os.replace(slim, path)
PY
du -sh .whl
