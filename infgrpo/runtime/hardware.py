"""What the machine can do, checked before a run spends minutes on what it cannot.

- :func:`check_accelerator`: ``trainer.accelerator: gpu`` on a machine without one fails before the
  model loads, naming ``--trainer.accelerator cpu`` (Lightning's own error, "No supported gpu backend
  found!", comes after loading and does not say what to change).
- :func:`slow_cpu_dtype`: bfloat16 / float16 weights on a CPU without native support for them run
  through slow conversions (a LoRA forward + backward of SmolLM2-135M: ~5 s in float32, ~110 s in
  bfloat16 on an AVX2-only CPU); the run warns once, naming ``--model.policy.dtype float32``.
"""

from __future__ import annotations

from pathlib import Path

from infgrpo.settings import ConfigError

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 AVX512-BF16 / AMX; aarch64 FEAT_BF16
FP16_CPU_FLAGS = ("avx512_fp16", "amx_fp16", "fphp")  # x86 AVX512-FP16 / AMX-FP16; aarch64 half-precision


def check_accelerator(accelerator: str | None, cuda_available: bool, mps_available: bool = False) -> None:
    """Raises a ConfigError (a ValueError) when ``accelerator`` asks for a GPU this machine lacks (a pure function).

    ``auto``, ``cpu`` and accelerator objects pass; ``gpu`` passes with CUDA or Apple MPS, ``cuda``
    needs CUDA, ``mps`` needs MPS.
    """
    if not isinstance(accelerator, str):
        return
    name = accelerator.lower()
    found = {"gpu": cuda_available or mps_available, "cuda": cuda_available, "mps": mps_available}.get(name, True)
    if not found:
        raise ConfigError(
            f"trainer.accelerator={accelerator!r} but this machine has no {'GPU' if name == 'gpu' else name.upper()} "
            "that torch can use. Run on the CPU with --trainer.accelerator cpu (with --model.policy.dtype float32 "
            "unless the CPU has native bfloat16), or --trainer.accelerator auto to take whatever is there."
        )


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (``flags`` on x86, ``Features`` on ARM); empty if unknown."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def slow_cpu_dtype(dtype: str, flags: set[str]) -> str | None:
    """A warning when ``dtype`` has no native support among the CPU's ``flags``, else None (a pure function)."""
    needed = {"bfloat16": BF16_CPU_FLAGS, "float16": FP16_CPU_FLAGS}.get(dtype)
    if needed is None or flags & set(needed):
        return None
    return (
        f"model.policy.dtype={dtype} on a CPU without native {dtype} (none of the CPU flags {', '.join(needed)}): "
        f"every matrix multiply converts, ~20x slower than float32. Use --model.policy.dtype float32 "
        "(and --model.bnb_4bit_compute_dtype float32 with 4-bit weights)."
    )
